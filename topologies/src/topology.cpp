// Topology: a validated ClusterSpec expanded into the graph. Devices get their global indices in
// node-group order, node by node; the in-node rules are in intra_node.cpp, the fabric's in
// fabric_layout.cpp and fabric_build.cpp.
#include "orrery/topologies/topology.hpp"

#include <map>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/stragglers.hpp"
#include "topology_builder.hpp"

namespace orrery::topologies {

const char* to_string(VertexKind kind) {
  switch (kind) {
    case VertexKind::kDevice:
      return "device";
    case VertexKind::kNvSwitch:
      return "nvswitch";
    case VertexKind::kPcieSwitch:
      return "pcie_switch";
    case VertexKind::kHost:
      return "host";
    case VertexKind::kNic:
      return "nic";
    case VertexKind::kLeaf:
      return "leaf";
    case VertexKind::kSpine:
      return "spine";
    case VertexKind::kCore:
      return "core";
  }
  return "?";
}

const char* to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvLink:
      return "nvlink";
    case LinkKind::kPcie:
      return "pcie";
    case LinkKind::kHostLink:
      return "host";
    case LinkKind::kNetwork:
      return "network";
  }
  return "?";
}

namespace detail {

Vertex GraphBuilder::vertex(VertexKind kind, std::string name, int64_t node, int64_t device) {
  return boost::add_vertex(VertexInfo{kind, std::move(name), node, device}, graph_);
}

void GraphBuilder::link(Vertex a, Vertex b, LinkKind kind, double bandwidth_bytes_per_s,
                        double latency_ab_s, double latency_ba_s) {
  ORRERY_CHECK(bandwidth_bytes_per_s > 0,
               "link " + graph_[a].name + " - " + graph_[b].name + " without bandwidth");
  boost::add_edge(a, b, LinkInfo{kind, bandwidth_bytes_per_s, latency_ab_s}, graph_);
  boost::add_edge(b, a, LinkInfo{kind, bandwidth_bytes_per_s, latency_ba_s}, graph_);
}

}  // namespace detail

namespace {

// A NIC straggler: the NIC's network links (to and from its leaf or rail switch) carry
// bandwidth_factor of their bandwidth. NICs are numbered in each node as they were built.
void degrade_nic_links(const pb::ClusterSpec& cluster, Graph& graph) {
  if (!has_stragglers(cluster)) return;
  std::map<int64_t, std::vector<Vertex>> nics_of_node;
  for (Vertex v = 0; v < boost::num_vertices(graph); ++v)
    if (graph[v].kind == VertexKind::kNic) nics_of_node[graph[v].node].push_back(v);
  for (const pb::Straggler& s : cluster.stragglers()) {
    if (!s.has_nic()) continue;
    const Vertex nic = nics_of_node.at(s.node()).at(static_cast<size_t>(s.nic()));
    for (auto [e, end] = boost::out_edges(nic, graph); e != end; ++e)
      if (graph[*e].kind == LinkKind::kNetwork)
        graph[*e].bandwidth_bytes_per_s *= s.bandwidth_factor();
    for (auto [e, end] = boost::in_edges(nic, graph); e != end; ++e)
      if (graph[*e].kind == LinkKind::kNetwork)
        graph[*e].bandwidth_bytes_per_s *= s.bandwidth_factor();
  }
}

}  // namespace

Topology::Topology(const pb::ClusterSpec& cluster) : spec_(cluster) {
  // A spec made in code has not been through a file reader: check it here so that expansion
  // can trust it.
  const SourceMap where(spec_.name().empty() ? std::string("cluster") : "cluster " + spec_.name());
  validate_cluster(spec_, where);
  detail::GraphBuilder builder(graph_);
  const auto nodes = detail::build_nodes(spec_, builder, devices_);
  num_nodes_ = static_cast<int64_t>(nodes.size());
  detail::build_fabric(spec_.fabric(), detail::plan_fabric(spec_, where), nodes, builder);
  degrade_nic_links(spec_, graph_);
}

}  // namespace orrery::topologies
