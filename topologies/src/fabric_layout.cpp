// Fabric layout: which leaf each NIC plugs into and how many switches each tier has. The rules
// here decide how much contention a simulated job sees, so they follow how such fabrics are
// cabled:
//   - A leaf (or rail switch) splits its `switch_radix` ports into `down` ports to NICs and `up`
//     ports to the next tier with down / up == oversubscription (ratio in ports; the bandwidth
//     ratio follows when NIC and switch ports run at the same speed).
//   - 2 tiers: the fewest spines S that can take every leaf uplink, S dividing `up` so every leaf
//     has the same up / S links to every spine. At most `switch_radix` leaves.
//   - 3 tiers: leaves form pods; a pod has `up` aggregation switches with one link from each of
//     its leaves (fat tree: switch_radix / 2 leaves per pod, so aggregation is non-blocking;
//     multi_pod: the leaves of `pod_nodes` nodes, uplinks thinned by pod_oversubscription).
//     Aggregation switch j of every pod joins core plane j. At most `switch_radix` pods.
//   - NIC order: leaf_spine, fat_tree and multi_pod fill leaves node by node (a node's NICs side
//     by side); rail_optimized puts NIC i of the `down` nodes of a group on rail switch i.
#include "fabric_layout.hpp"

#include <algorithm>
#include <cmath>

#include "orrery/base/units.hpp"
#include "orrery/topologies/transport.hpp"

namespace orrery::topologies::detail {
namespace {

std::string kind_name(pb::FabricKind kind) {
  return enum_value_name(*pb::FabricKind_descriptor()->FindValueByNumber(kind));
}

const pb::NodeType* node_type(const pb::ClusterSpec& cluster, const std::string& name) {
  for (const auto& t : cluster.node_types()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

int64_t smallest_divisor_at_least(int64_t n, int64_t at_least) {
  for (int64_t d = std::max<int64_t>(1, at_least); d < n; ++d) {
    if (n % d == 0) return d;
  }
  return n;
}

LeafPorts leaf_ports(const pb::FabricSpec& f, const SourceMap& where) {
  const std::string kind = kind_name(f.kind());
  if (f.switch_radix() == 0) {
    where.fail("fabric.switch_radix", "required for a " + kind + " fabric (ports per switch)");
  }
  if (f.switch_radix() < 2) {
    where.fail("fabric.switch_radix", "got " + std::to_string(f.switch_radix()) +
                                          ", a switch needs at least 2 ports (down and up)");
  }
  const double o = f.oversubscription() == 0 ? 1.0 : f.oversubscription();
  if (o < 1) {
    where.fail("fabric.oversubscription",
               "got " + base::units::number(o) +
                   ", expected >= 1 (1 is non-blocking, 3 is 3 downlinks per uplink)");
  }
  const double up = static_cast<double>(f.switch_radix()) / (1 + o);
  if (std::abs(up - std::round(up)) > 1e-9 || std::round(up) < 1) {
    where.fail("fabric.switch_radix", "got " + std::to_string(f.switch_radix()) +
                                          ", which cannot be split into downlinks : uplinks = " +
                                          base::units::number(o) + " : 1 in whole ports");
  }
  LeafPorts ports;
  ports.up = static_cast<int64_t>(std::round(up));
  ports.down = f.switch_radix() - ports.up;
  return ports;
}

int tiers_of(const pb::FabricSpec& f, const SourceMap& where) {
  const std::string got = "got " + std::to_string(f.tiers());
  switch (f.kind()) {
    case pb::FABRIC_KIND_LEAF_SPINE:
      if (f.tiers() != 0 && f.tiers() != 2) {
        where.fail("fabric.tiers", got + ", a leaf_spine fabric has 2 tiers (use fat_tree for 3)");
      }
      return 2;
    case pb::FABRIC_KIND_FAT_TREE:
      if (f.tiers() != 2 && f.tiers() != 3) {
        where.fail("fabric.tiers", got + ", expected 2 or 3 for a fat_tree");
      }
      return static_cast<int>(f.tiers());
    case pb::FABRIC_KIND_RAIL_OPTIMIZED:
      if (f.tiers() != 0 && f.tiers() != 2 && f.tiers() != 3) {
        where.fail("fabric.tiers", got + ", expected 2 or 3 for a rail_optimized fabric");
      }
      return f.tiers() == 3 ? 3 : 2;
    default:  // multi_pod
      if (f.tiers() != 0 && f.tiers() != 3) {
        where.fail("fabric.tiers",
                   got + ", a multi_pod fabric has 3 tiers (leaf, pod spine, core)");
      }
      return 3;
  }
}

// Leaves filled in order, `down` NICs each; with pods of nodes, every pod starts a new leaf.
void fill_leaves(FabricLayout& out, const std::vector<int64_t>& nics, int64_t nodes_per_pod) {
  int64_t leaf = -1, used = out.ports.down;
  for (size_t n = 0; n < nics.size(); ++n) {
    const bool new_pod = nodes_per_pod > 0 && static_cast<int64_t>(n) % nodes_per_pod == 0;
    for (int64_t i = 0; i < nics[n]; ++i) {
      if (used == out.ports.down || (new_pod && i == 0)) {
        ++leaf, used = 0;
        out.pod_of_leaf.push_back(nodes_per_pod > 0 ? static_cast<int64_t>(n) / nodes_per_pod : 0);
      }
      out.leaf_of_nic.push_back(leaf);
      ++used;
    }
  }
  out.leaves = leaf + 1;
}

void fill_rails(FabricLayout& out, const std::vector<int64_t>& nics, int64_t groups_per_pod) {
  out.rail = true;
  out.rails = nics.empty() ? 0 : nics[0];
  const int64_t groups = (static_cast<int64_t>(nics.size()) + out.ports.down - 1) / out.ports.down;
  for (size_t n = 0; n < nics.size(); ++n) {
    const int64_t group = static_cast<int64_t>(n) / out.ports.down;
    for (int64_t i = 0; i < nics[n]; ++i) out.leaf_of_nic.push_back(group * out.rails + i);
  }
  out.leaves = groups * out.rails;
  for (int64_t l = 0; l < out.leaves; ++l) {
    out.pod_of_leaf.push_back(groups_per_pod > 0 ? (l / out.rails) / groups_per_pod : 0);
  }
}

}  // namespace

std::vector<int64_t> nics_per_node(const pb::ClusterSpec& cluster) {
  std::vector<int64_t> out;
  for (const auto& g : cluster.node_groups()) {
    const pb::NodeType* t = node_type(cluster, g.node_type());
    out.insert(out.end(), static_cast<size_t>(g.count()), t ? net_devices(*t).count : 0);
  }
  return out;
}

FabricLayout plan_fabric(const pb::ClusterSpec& cluster, const SourceMap& where) {
  FabricLayout out;
  const pb::FabricSpec& f = cluster.fabric();
  if (f.kind() == pb::FABRIC_KIND_NONE) return out;
  const std::string kind = kind_name(f.kind());
  out.ports = leaf_ports(f, where);
  if (!f.has_switch_link()) {
    where.fail("fabric.switch_link",
               "required for a " + kind + " fabric (one switch-to-switch port)");
  }
  if (f.kind() != pb::FABRIC_KIND_MULTI_POD && f.pod_nodes() != 0) {
    where.fail("fabric.pod_nodes",
               "only a multi_pod fabric has pods of nodes, this one is " + kind);
  }
  out.tiers = tiers_of(f, where);
  const int64_t radix = f.switch_radix();
  const std::vector<int64_t> nics = nics_per_node(cluster);
  for (size_t n = 0, first = 0; n < nics.size(); first += static_cast<size_t>(nics[n]), ++n) {
    out.first_nic_of_node.push_back(static_cast<int64_t>(first));
  }

  if (f.kind() == pb::FABRIC_KIND_MULTI_POD) {
    if (f.pod_nodes() == 0)
      where.fail("fabric.pod_nodes", "required for a multi_pod fabric (nodes per pod)");
    out.pod_oversubscription = f.pod_oversubscription() == 0 ? 1.0 : f.pod_oversubscription();
    if (out.pod_oversubscription < 1) {
      where.fail("fabric.pod_oversubscription", "got " +
                                                    base::units::number(out.pod_oversubscription) +
                                                    ", expected >= 1 (1 is non-blocking)");
    }
    fill_leaves(out, nics, f.pod_nodes());
  } else if (f.kind() == pb::FABRIC_KIND_RAIL_OPTIMIZED) {
    int64_t groups_per_pod = 0;
    if (out.tiers == 3) {
      const int64_t rails = nics.empty() ? 0 : nics[0];
      groups_per_pod = (radix / 2) / std::max<int64_t>(1, rails);
      if (groups_per_pod == 0) {
        where.fail("fabric.switch_radix",
                   "got " + std::to_string(radix) + ": a pod's aggregation switches serve " +
                       std::to_string(radix / 2) + " leaves, fewer than the " +
                       std::to_string(rails) + " rails of one group");
      }
    }
    fill_rails(out, nics, groups_per_pod);
  } else {
    fill_leaves(out, nics, 0);
    if (out.tiers == 3) {
      for (int64_t l = 0; l < out.leaves; ++l)
        out.pod_of_leaf[static_cast<size_t>(l)] = l / (radix / 2);
    }
  }

  if (out.tiers == 2) {
    if (out.leaves > radix) {
      where.fail("fabric.switch_radix",
                 std::to_string(out.leaves) + " leaves need more than the " +
                     std::to_string(radix) +
                     " ports of a spine; use 3 tiers (fat_tree or rail_optimized) or multi_pod");
    }
    const int64_t needed = (out.leaves * out.ports.up + radix - 1) / radix;
    out.spines = smallest_divisor_at_least(out.ports.up, needed);
    return out;
  }
  out.pods = out.pod_of_leaf.empty() ? 0 : out.pod_of_leaf.back() + 1;
  if (out.pods > radix) {
    where.fail("fabric.switch_radix", std::to_string(out.pods) + " pods need more than the " +
                                          std::to_string(radix) + " ports of a core switch");
  }
  if (f.kind() == pb::FABRIC_KIND_MULTI_POD) {
    std::vector<int64_t> leaves_in_pod(static_cast<size_t>(out.pods), 0);
    for (int64_t p : out.pod_of_leaf) ++leaves_in_pod[static_cast<size_t>(p)];
    const int64_t most =
        leaves_in_pod.empty() ? 0 : *std::max_element(leaves_in_pod.begin(), leaves_in_pod.end());
    const auto up =
        static_cast<int64_t>(std::ceil(static_cast<double>(most) / out.pod_oversubscription));
    if (most + up > radix) {
      where.fail("fabric.pod_nodes", "a pod of " + std::to_string(f.pod_nodes()) + " nodes has " +
                                         std::to_string(most) + " leaves, so a pod spine needs " +
                                         std::to_string(most) + " downlinks + " +
                                         std::to_string(up) + " uplinks, more than switch_radix " +
                                         std::to_string(radix));
    }
  }
  return out;
}

}  // namespace orrery::topologies::detail
