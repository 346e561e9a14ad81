// `orrery topo list|show|check|discover|graph`.
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/discover.hpp"
#include "orrery/topologies/routing.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "table.hpp"

namespace orrery::cli {
namespace {

struct ClusterArgs {
  std::string cluster;
  int64_t nodes = 0;  // 0: as the spec says
  int64_t max_nodes = 4;
  std::string out_file;
  bool force = false;
};

pb::ClusterSpec load(const ClusterArgs& a, SourceMap* where = nullptr) {
  std::optional<int64_t> nodes;
  if (a.nodes > 0) nodes = a.nodes;
  return topologies::load_cluster(a.cluster, nodes, where);
}

std::string enum_name(const google::protobuf::EnumDescriptor* e, int value) {
  return enum_value_name(*e->FindValueByNumber(value));
}

std::string intra_summary(const pb::NodeType& nt) {
  const auto& in = nt.intra();
  std::string s = enum_name(pb::IntraNodeKind_descriptor(), in.kind());
  if (in.has_device_link())
    s += " " + base::units::bandwidth(in.device_link().bandwidth_bytes_per_s());
  if (in.domain_nodes() > 1) s += ", domain of " + std::to_string(in.domain_nodes()) + " nodes";
  return s;
}

std::string nic_summary(const pb::NodeType& nt) {
  if (nt.nic().count() == 0) return "-";
  return std::to_string(nt.nic().count()) + " x " +
         base::units::bandwidth(nt.nic().link().bandwidth_bytes_per_s());
}

std::string fabric_summary(const pb::FabricSpec& f) {
  std::string s = enum_name(pb::FabricKind_descriptor(), f.kind());
  if (f.tiers() > 0) s += ", " + std::to_string(f.tiers()) + " tiers";
  if (f.switch_radix() > 0) s += ", radix " + std::to_string(f.switch_radix());
  if (f.oversubscription() > 1)
    s += ", " + base::units::number(f.oversubscription()) + ":1 oversubscribed";
  if (f.pod_nodes() > 0) s += ", pods of " + std::to_string(f.pod_nodes()) + " nodes";
  return s;
}

void show_cluster(const ClusterArgs& a, const OutputFlags& out) {
  const pb::ClusterSpec spec = load(a);
  if (print_spec_if_asked(spec, out)) return;
  double peak_bf16 = 0, memory = 0;
  Table groups({"group", "nodes", "node type", "device", "per node", "intra-node", "NICs"});
  Table devices({"device", "bf16", "fp8", "fp32", "memory", "memory bw"});
  std::vector<std::string> shown;
  for (const auto& g : spec.node_groups()) {
    const pb::NodeType* nt = nullptr;
    for (const auto& t : spec.node_types())
      if (t.name() == g.node_type()) nt = &t;
    ORRERY_CHECK(nt != nullptr, "validated cluster with an unknown node type");
    const pb::DeviceSpec& d = topologies::find_device(spec, nt->device());
    const double n = static_cast<double>(g.count() * nt->devices_per_node());
    peak_bf16 += n * topologies::peak_flops(d, "bf16");
    memory += n * d.memory_bytes();
    groups.add_row({g.name(), std::to_string(g.count()), nt->name(), d.name(),
                    std::to_string(nt->devices_per_node()), intra_summary(*nt), nic_summary(*nt)});
    if (std::find(shown.begin(), shown.end(), d.name()) == shown.end()) {
      shown.push_back(d.name());
      devices.add_row(
          {d.name(), base::units::flop_rate(d.peak_flops().bf16()),
           d.peak_flops().fp8() > 0 ? base::units::flop_rate(d.peak_flops().fp8()) : "-",
           base::units::flop_rate(d.peak_flops().fp32()), base::units::bytes(d.memory_bytes()),
           base::units::bandwidth(d.memory_bandwidth_bytes_per_s())});
    }
  }
  std::cout << render_fields({{"cluster", spec.name()},
                              {"description", spec.description()},
                              {"nodes", std::to_string(topologies::total_nodes(spec))},
                              {"devices", std::to_string(topologies::total_devices(spec))},
                              {"fabric", fabric_summary(spec.fabric())},
                              {"peak bf16 (dense)", base::units::flop_rate(peak_bf16)},
                              {"device memory", base::units::bytes(memory)}})
            << "\n"
            << groups.render() << "\n"
            << devices.render();
}

void check_cluster(const ClusterArgs& a, const OutputFlags& out) {
  SourceMap where;
  const pb::ClusterSpec spec = load(a, &where);
  const topologies::Topology topo(spec);
  const std::vector<std::string> problems = topologies::check_graph(topo);
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += "\n  " + p;
    throw base::InputError(where.file().empty() ? spec.name() : where.file(), 0, "",
                           "the expanded topology is broken:" + all);
  }
  const auto& g = topo.graph();
  nlohmann::ordered_json j{{"cluster", spec.name()},
                           {"ok", true},
                           {"nodes", topo.num_nodes()},
                           {"devices", topo.num_devices()},
                           {"vertices", boost::num_vertices(g)},
                           {"links", boost::num_edges(g)},
                           // null when the cluster has no such pair (one device per node, or
                           // one node): the keys are there either way.
                           {"intra-node pair", nullptr},
                           {"inter-node pair", nullptr}};
  std::vector<std::pair<std::string, std::string>> f{
      {"cluster", spec.name() + ": ok"},
      {"nodes / devices",
       std::to_string(topo.num_nodes()) + " / " + std::to_string(topo.num_devices())},
      {"graph", std::to_string(boost::num_vertices(g)) + " vertices, " +
                    std::to_string(boost::num_edges(g)) + " links (one per direction)"}};
  // Representative pairs: neighbours in a node, and the first devices of the first two nodes.
  auto pair = [&](const std::string& label, int64_t src, int64_t dst) {
    const auto routes = topologies::ecmp_routes(topo, src, dst);
    if (routes.empty()) return;
    const double bw = topologies::pair_bottleneck_bandwidth(topo, src, dst);
    f.emplace_back(label, base::units::bandwidth(bw) + ", " +
                              std::to_string(routes.front().edges.size()) + " hops, " +
                              base::units::seconds(routes.front().latency_s) + ", " +
                              std::to_string(routes.size()) + " equal-cost route(s)");
    j[label] = {{"src", src},
                {"dst", dst},
                {"bottleneck_bytes_per_s", bw},
                {"hops", routes.front().edges.size()},
                {"latency_s", routes.front().latency_s},
                {"ecmp_routes", routes.size()}};
  };
  if (topo.num_devices() > 1 && topo.device(1).node == topo.device(0).node) {
    pair("intra-node pair", 0, 1);
  }
  // The first device outside device 0's node and NVLink domain: a pair that uses the network.
  for (int64_t d = 1; d < topo.num_devices(); ++d) {
    const auto& a = topo.device(0);
    const auto& b = topo.device(d);
    const bool same_domain = a.nvlink_domain >= 0 && a.nvlink_domain == b.nvlink_domain;
    if (b.node != a.node && !same_domain) {
      pair("inter-node pair", 0, d);
      break;
    }
  }
  const double bisection = topologies::bisection_bandwidth(topo);
  f.emplace_back("bisection bandwidth", base::units::bandwidth(bisection) + " per direction");
  j["bisection_bytes_per_s"] = bisection;
  if (out.json) {
    std::cout << with_header("orrery.topo.check", j).dump(2) << "\n";
  } else {
    std::cout << render_fields(f);
  }
}

void discover(const ClusterArgs& a, const OutputFlags& out) {
  const pb::ClusterSpec spec = topologies::discover_local_machine();
  const std::string text = out.json ? to_json(spec) : to_yaml(spec);
  emit(text, a.out_file, a.force);
}

void graph(const ClusterArgs& a) {
  const topologies::Topology topo(load(a));
  const std::string dot = topologies::to_dot(topo, a.max_nodes);
  emit(dot, a.out_file, a.force);
  const int64_t nodes = topologies::total_nodes(topo.spec());
  if (nodes > a.max_nodes) {
    std::cerr << "topo graph: drew the first " << a.max_nodes << " of " << nodes
              << " nodes and their fabric; --max-nodes " << nodes << " draws them all\n";
  }
}

void list_clusters(const OutputFlags& out) {
  Table table({"cluster", "nodes", "devices", "fabric", "description"});
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& name : topologies::preset_names()) {
    const pb::ClusterSpec spec = topologies::preset(name);
    table.add_row({name, std::to_string(topologies::total_nodes(spec)),
                   std::to_string(topologies::total_devices(spec)),
                   enum_name(pb::FabricKind_descriptor(), spec.fabric().kind()),
                   spec.description()});
    rows.push_back({{"name", name},
                    {"nodes", topologies::total_nodes(spec)},
                    {"devices", topologies::total_devices(spec)}});
  }
  if (out.json) {
    std::cout << with_header("orrery.topo.list", {{"clusters", rows}}).dump(2) << "\n";
  } else {
    std::cout << table.render();
  }
}

void add_cluster_args(CLI::App* cmd, ClusterArgs& a) {
  cmd->add_option("cluster", a.cluster, "Preset name or YAML/JSON file")->required();
  cmd->add_option("--nodes", a.nodes, "Size the cluster to this many nodes")
      ->check(CLI::PositiveNumber);
}

}  // namespace

void add_topo_commands(CLI::App& app) {
  CLI::App* topo = app.add_subcommand("topo", "Cluster specs: presets, checks, discovery, graphs");
  topo->require_subcommand(1);

  auto out_list = std::make_shared<OutputFlags>();
  CLI::App* list = topo->add_subcommand("list", "List the built-in cluster presets");
  add_output_flags(list, *out_list, false);
  list->callback([out_list] { list_clusters(*out_list); });

  auto sa = std::make_shared<ClusterArgs>();
  auto out_show = std::make_shared<OutputFlags>();
  CLI::App* show = topo->add_subcommand("show", "Show a cluster preset or file");
  add_cluster_args(show, *sa);
  add_output_flags(show, *out_show, true);
  show->callback([sa, out_show] { show_cluster(*sa, *out_show); });

  auto ca = std::make_shared<ClusterArgs>();
  auto out_check = std::make_shared<OutputFlags>();
  CLI::App* check = topo->add_subcommand(
      "check", "Validate a cluster, expand it and report routes and bisection bandwidth");
  add_cluster_args(check, *ca);
  add_output_flags(check, *out_check, false);
  check->callback([ca, out_check] { check_cluster(*ca, *out_check); });

  auto da = std::make_shared<ClusterArgs>();
  auto out_disc = std::make_shared<OutputFlags>();
  CLI::App* disc = topo->add_subcommand("discover", "Describe this machine as a cluster file");
  disc->add_option("--out", da->out_file, "Write here instead of standard output");
  disc->add_flag("--force", da->force, "Replace --out if it exists");
  add_output_flags(disc, *out_disc, false);
  disc->callback([da, out_disc] { discover(*da, *out_disc); });

  auto ga = std::make_shared<ClusterArgs>();
  CLI::App* g = topo->add_subcommand("graph", "Graphviz dot of the expanded topology");
  add_cluster_args(g, *ga);
  g->add_option("--max-nodes", ga->max_nodes, "Draw at most this many nodes")
      ->check(CLI::PositiveNumber);
  g->add_option("--out", ga->out_file, "Write here instead of standard output");
  g->add_flag("--force", ga->force, "Replace --out if it exists");
  g->callback([ga] { graph(*ga); });
}

}  // namespace orrery::cli
