#include "orrery/sim/footprint.hpp"

#include <set>

#include <boost/range/iterator_range.hpp>

namespace orrery::sim {
namespace {

int64_t fabric_switches(const topologies::Topology& topology) {
  int64_t n = 0;
  for (const auto v : boost::make_iterator_range(boost::vertices(topology.graph()))) {
    const auto kind = topology.graph()[v].kind;
    if (kind == topologies::VertexKind::kLeaf || kind == topologies::VertexKind::kSpine ||
        kind == topologies::VertexKind::kCore) {
      ++n;
    }
  }
  return n;
}

}  // namespace

Footprint footprint(const plan::ResolvedPlan& plan, const topologies::Topology& topology) {
  Footprint f;
  f.gpus = plan.world_size();
  std::set<int64_t> nodes;
  for (const int64_t device : plan.device_of_rank) nodes.insert(topology.device(device).node);
  f.hosts = static_cast<int64_t>(nodes.size());
  // Each node's NIC count comes from its node type (node groups are laid out in order).
  int64_t first = 0;
  for (const auto& group : plan.cluster.node_groups()) {
    int64_t nics_per_node = 0;
    for (const auto& type : plan.cluster.node_types()) {
      if (type.name() == group.node_type()) nics_per_node = type.nic().count();
    }
    for (int64_t node = first; node < first + group.count(); ++node) {
      if (nodes.count(node) != 0) f.nics += nics_per_node;
    }
    first += group.count();
  }
  f.links = f.nics;
  // A plan on part of the cluster depends on the switches its traffic crosses; without routing
  // every flow, its share of the fabric is taken in proportion to its nodes, rounded up.
  const int64_t switches = fabric_switches(topology);
  const int64_t total_nodes = topology.num_nodes();
  f.switches = total_nodes > 0 ? (switches * f.hosts + total_nodes - 1) / total_nodes : 0;
  return f;
}

}  // namespace orrery::sim
