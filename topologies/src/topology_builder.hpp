// Private helpers for expanding a ClusterSpec into the graph: adding vertices and full-duplex
// links, the in-node parts and the fabric.
#pragma once

#include <string>
#include <vector>

#include "fabric_layout.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::topologies::detail {

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : graph_(graph) {}

  Vertex vertex(VertexKind kind, std::string name, int64_t node = -1, int64_t device = -1);
  // Two edges, a->b and b->a, each with `bandwidth`; latency of each direction given apart
  // because a switch's own latency belongs to the edge entering it.
  void link(Vertex a, Vertex b, LinkKind kind, double bandwidth_bytes_per_s, double latency_ab_s,
            double latency_ba_s);
  Graph& graph() { return graph_; }

 private:
  Graph& graph_;
};

// The vertices of one node that the fabric attaches to.
struct NodeVertices {
  std::vector<Vertex> nics;
  double nic_bandwidth_bytes_per_s = 0;
  double nic_latency_s = 0;
};

// Builds the devices, switches, host and NICs of every node; fills `devices`.
std::vector<NodeVertices> build_nodes(const pb::ClusterSpec& cluster, GraphBuilder& builder,
                                      std::vector<DeviceInfo>& devices);

// Builds the scale-out fabric over the nodes' NICs.
void build_fabric(const pb::FabricSpec& fabric, const FabricLayout& layout,
                  const std::vector<NodeVertices>& nodes, GraphBuilder& builder);

}  // namespace orrery::topologies::detail
