// Cluster presets (presets/clusters/*.yaml, compiled in; `local` discovered), loading from a
// file, sizing and totals.
#include "orrery/topologies/cluster_catalog.hpp"

#include <algorithm>

#include "embedded_presets.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/topologies/discover.hpp"
#include "orrery/traces/field_ranges.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {
namespace {

constexpr std::string_view kLocal = "local";

// The preset, parsed but not validated (load_cluster resizes before validating).
pb::ClusterSpec read_preset(std::string_view name, SourceMap* where) {
  if (name == kLocal) {
    if (where != nullptr) *where = SourceMap("local (discovered)");
    return discover_local_machine();
  }
  for (const auto& file : cluster_files::embedded_files()) {
    if (file.name == name) {
      pb::ClusterSpec spec;
      parse_spec(file.text, "presets/clusters/" + std::string(name) + ".yaml", SpecFormat::kYaml,
                 &spec, where);
      return spec;
    }
  }
  throw base::InputError(
      "", 0, "cluster",
      "unknown cluster preset '" + std::string(name) + "'" + base::suggest(name, preset_names()));
}

const pb::NodeType* type_of(const pb::ClusterSpec& c, const pb::NodeGroup& g) {
  for (const auto& t : c.node_types()) {
    if (t.name() == g.node_type()) return &t;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& file : cluster_files::embedded_files()) names.emplace_back(file.name);
  names.emplace_back(kLocal);
  std::sort(names.begin(), names.end());
  return names;
}

pb::ClusterSpec preset(std::string_view name) {
  SourceMap where;
  pb::ClusterSpec spec = read_preset(name, &where);
  validate_cluster(spec, where);
  return spec;
}

pb::ClusterSpec load_cluster(std::string_view name_or_file, std::optional<int64_t> nodes,
                             SourceMap* where) {
  SourceMap local;
  SourceMap& w = where != nullptr ? *where : local;
  pb::ClusterSpec spec;
  if (base::names_a_file(name_or_file)) {
    read_spec_file(std::filesystem::path(name_or_file), &spec, &w);
  } else {
    spec = read_preset(name_or_file, &w);
  }
  if (nodes) resize(spec, *nodes);
  validate_cluster(spec, w);
  return spec;
}

void resize(pb::ClusterSpec& cluster, int64_t nodes) {
  if (nodes <= 0) {
    throw base::InputError("", 0, "--nodes",
                           "got " + std::to_string(nodes) + ", expected a node count > 0");
  }
  // The node count a file could hold is the most --nodes may ask for (checked before any
  // multiplication, so none overflows).
  const auto* count = pb::NodeGroup::descriptor()->FindFieldByName("count");
  if (auto problem = field_value_problem(*count, static_cast<double>(nodes), std::to_string(nodes));
      !problem.empty()) {
    throw base::InputError("", 0, "--nodes", problem);
  }
  if (cluster.node_groups_size() == 1) {
    cluster.mutable_node_groups(0)->set_count(nodes);
    return;
  }
  const int64_t total = total_nodes(cluster);
  if (total <= 0 || nodes % total != 0) {
    throw base::InputError("", 0, "--nodes",
                           "got " + std::to_string(nodes) + ", but cluster '" + cluster.name() +
                               "' mixes " + std::to_string(cluster.node_groups_size()) +
                               " node groups in " + std::to_string(total) +
                               " nodes: give a multiple of " + std::to_string(total) +
                               " to keep the mix");
  }
  for (auto& g : *cluster.mutable_node_groups()) g.set_count(g.count() * (nodes / total));
}

int64_t total_nodes(const pb::ClusterSpec& cluster) {
  int64_t n = 0;
  for (const auto& g : cluster.node_groups()) n += g.count();
  return n;
}

int64_t total_devices(const pb::ClusterSpec& cluster) {
  int64_t n = 0;
  for (const auto& g : cluster.node_groups()) {
    if (const pb::NodeType* t = type_of(cluster, g)) n += g.count() * t->devices_per_node();
  }
  return n;
}

}  // namespace orrery::topologies
