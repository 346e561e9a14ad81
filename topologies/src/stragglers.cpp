// Stragglers (orrery/topologies/stragglers.hpp): checks, the compute factor of a device and the
// `--straggler` flag's text. The degraded links are applied where the graph is built
// (degrade_nic_links, topology.cpp).
#include "orrery/topologies/stragglers.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/transport.hpp"

namespace orrery::topologies {
namespace {

std::string at(int i) { return "stragglers[" + std::to_string(i) + "]"; }

struct Counts {
  int64_t gpus = 0;
  std::vector<int64_t> nics_of_node;
};

Counts counts(const pb::ClusterSpec& c) {
  Counts out;
  for (const pb::NodeGroup& g : c.node_groups()) {
    for (const pb::NodeType& t : c.node_types()) {
      if (t.name() != g.node_type()) continue;
      out.gpus += g.count() * t.devices_per_node();
      out.nics_of_node.insert(out.nics_of_node.end(), static_cast<size_t>(g.count()),
                              net_devices(t).count);
    }
  }
  return out;
}

void check_factor(bool has, double factor, const std::string& path, const SourceMap& where) {
  if (!has) where.fail(path, "required");
  if (!(factor > 0) || !std::isfinite(factor))
    where.fail(path, "expected a finite value > 0, got " + base::units::number(factor));
}

void check_gpu(const pb::Straggler& s, const std::string& path, const Counts& n,
               const SourceMap& where) {
  if (s.has_node() || s.has_nic() || s.has_bandwidth_factor())
    where.fail(path, "a GPU straggler takes gpu and compute_factor only");
  if (s.gpu() >= n.gpus) {
    where.fail(path + ".gpu", "got " + std::to_string(s.gpu()) + ", but the cluster has " +
                                  std::to_string(n.gpus) + " GPUs (0 to " +
                                  std::to_string(n.gpus - 1) + ")");
  }
  check_factor(s.has_compute_factor(), s.compute_factor(), path + ".compute_factor", where);
}

void check_nic(const pb::Straggler& s, const std::string& path, const Counts& n,
               const SourceMap& where) {
  if (s.has_compute_factor())
    where.fail(path, "a NIC straggler takes node, nic and bandwidth_factor only");
  const auto nodes = static_cast<int64_t>(n.nics_of_node.size());
  if (s.node() >= nodes) {
    where.fail(path + ".node", "got " + std::to_string(s.node()) + ", but the cluster has " +
                                   std::to_string(nodes) + " nodes");
  }
  if (!s.has_nic()) where.fail(path + ".nic", "required with node");
  const int64_t nics = n.nics_of_node[static_cast<size_t>(s.node())];
  if (s.nic() >= nics) {
    where.fail(path + ".nic", "got " + std::to_string(s.nic()) + ", but node " +
                                  std::to_string(s.node()) + " has " + std::to_string(nics) +
                                  " NICs");
  }
  check_factor(s.has_bandwidth_factor(), s.bandwidth_factor(), path + ".bandwidth_factor", where);
}

}  // namespace

bool has_stragglers(const pb::ClusterSpec& cluster) { return cluster.stragglers_size() > 0; }

double compute_factor(const pb::ClusterSpec& cluster, int64_t device) {
  double f = 1;
  for (const pb::Straggler& s : cluster.stragglers())
    if (s.has_gpu() && s.gpu() == device) f *= s.compute_factor();
  return f;
}

void check_stragglers(const pb::ClusterSpec& cluster, const SourceMap& where) {
  const Counts n = counts(cluster);
  for (int i = 0; i < cluster.stragglers_size(); ++i) {
    const pb::Straggler& s = cluster.stragglers(i);
    if (s.has_gpu() == s.has_node()) where.fail(at(i), "give either gpu or node (with nic)");
    if (s.has_gpu()) {
      check_gpu(s, at(i), n, where);
    } else {
      check_nic(s, at(i), n, where);
    }
  }
}

namespace {

int64_t index_of(std::string_view text, const std::string& flag, const std::string& whole) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
    throw base::InputError("", 0, flag,
                           "got '" + whole + "': '" + std::string(text) +
                               "' is not an index (expected gpu=N:F or nic=NODE.I:F)");
  }
  return v;
}

}  // namespace

void add_straggler(pb::ClusterSpec& cluster, const std::string& text, const std::string& flag) {
  const size_t eq = text.find('='), colon = text.rfind(':');
  const std::string usage =
      "expected gpu=N:F (GPU N computes F times as long) or "
      "nic=NODE.I:F (NIC I of node NODE at F of its bandwidth)";
  if (eq == std::string::npos || colon == std::string::npos || colon < eq)
    throw base::InputError("", 0, flag, "got '" + text + "', " + usage);
  const std::string kind = text.substr(0, eq), target = text.substr(eq + 1, colon - eq - 1);
  double factor = 0;
  const std::string f = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), factor);
  if (ec != std::errc() || end != f.data() + f.size() || !(factor > 0) || !std::isfinite(factor))
    throw base::InputError("", 0, flag, "got '" + text + "': the factor must be a number > 0");
  pb::Straggler& s = *cluster.add_stragglers();
  if (kind == "gpu") {
    s.set_gpu(index_of(target, flag, text));
    s.set_compute_factor(factor);
  } else if (kind == "nic") {
    const size_t dot = target.find('.');
    if (dot == std::string::npos)
      throw base::InputError("", 0, flag, "got '" + text + "', " + usage);
    s.set_node(index_of(target.substr(0, dot), flag, text));
    s.set_nic(index_of(target.substr(dot + 1), flag, text));
    s.set_bandwidth_factor(factor);
  } else {
    cluster.mutable_stragglers()->RemoveLast();
    throw base::InputError("", 0, flag, "got '" + text + "', " + usage);
  }
}

}  // namespace orrery::topologies
