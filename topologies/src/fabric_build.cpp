// The scale-out fabric as graph edges, following the layout (fabric_layout.cpp).
// Parallel links between the same two switches become one edge whose bandwidth is their sum:
// under flow-level max-min sharing, k parallel links of bandwidth b that ECMP spreads flows over
// evenly carry what one link of k * b carries, and a 16K-GPU fabric keeps one edge per switch
// pair instead of one per cable. Latency of an edge = the link's latency + the switch it enters
// (switch_latency_s); a NIC's end-to-end latency is split between the two NIC edges of a route.
#include <string>

#include "topology_builder.hpp"

namespace orrery::topologies::detail {
namespace {

std::vector<Vertex> add_leaves(const FabricLayout& layout, GraphBuilder& b) {
  std::vector<Vertex> leaves;
  for (int64_t l = 0; l < layout.leaves; ++l) {
    const std::string name = layout.rail ? "g" + std::to_string(l / layout.rails) + ".rail" +
                                               std::to_string(l % layout.rails)
                                         : "leaf" + std::to_string(l);
    leaves.push_back(b.vertex(VertexKind::kLeaf, name));
  }
  return leaves;
}

void attach_nics(const pb::FabricSpec& f, const FabricLayout& layout,
                 const std::vector<NodeVertices>& nodes, const std::vector<Vertex>& leaves,
                 GraphBuilder& b) {
  for (size_t n = 0; n < nodes.size(); ++n) {
    const NodeVertices& node = nodes[n];
    for (size_t i = 0; i < node.nics.size(); ++i) {
      const auto nic = static_cast<size_t>(layout.first_nic_of_node[n]) + i;
      const Vertex leaf = leaves[static_cast<size_t>(layout.leaf_of_nic[nic])];
      b.link(node.nics[i], leaf, LinkKind::kNetwork, node.nic_bandwidth_bytes_per_s,
             node.nic_latency_s / 2 + f.switch_latency_s(), node.nic_latency_s / 2);
    }
  }
}

void add_spines(const pb::FabricSpec& f, const FabricLayout& layout,
                const std::vector<Vertex>& leaves, GraphBuilder& b) {
  const double latency = f.switch_link().latency_s() + f.switch_latency_s();
  const double bandwidth = static_cast<double>(layout.ports.up / layout.spines) *
                           f.switch_link().bandwidth_bytes_per_s();
  for (int64_t s = 0; s < layout.spines; ++s) {
    const Vertex spine = b.vertex(VertexKind::kSpine, "spine" + std::to_string(s));
    for (Vertex leaf : leaves) b.link(leaf, spine, LinkKind::kNetwork, bandwidth, latency, latency);
  }
}

void add_pods(const pb::FabricSpec& f, const FabricLayout& layout,
              const std::vector<Vertex>& leaves, GraphBuilder& b) {
  const double latency = f.switch_link().latency_s() + f.switch_latency_s();
  const double link_bw = f.switch_link().bandwidth_bytes_per_s();
  std::vector<Vertex> cores;
  for (int64_t j = 0; j < layout.ports.up; ++j) {
    cores.push_back(b.vertex(VertexKind::kCore, "core" + std::to_string(j)));
  }
  size_t first = 0;
  for (int64_t p = 0; p < layout.pods; ++p) {
    size_t end = first;
    while (end < leaves.size() && layout.pod_of_leaf[end] == p) ++end;
    const auto pod_leaves = static_cast<double>(end - first);
    for (int64_t j = 0; j < layout.ports.up; ++j) {
      const Vertex agg =
          b.vertex(VertexKind::kSpine, "p" + std::to_string(p) + ".spine" + std::to_string(j));
      for (size_t l = first; l < end; ++l) {
        b.link(leaves[l], agg, LinkKind::kNetwork, link_bw, latency, latency);
      }
      // As many uplinks as downlinks (fat tree), or thinned by the pod oversubscription.
      b.link(agg, cores[static_cast<size_t>(j)], LinkKind::kNetwork,
             pod_leaves * link_bw / layout.pod_oversubscription, latency, latency);
    }
    first = end;
  }
}

}  // namespace

void build_fabric(const pb::FabricSpec& f, const FabricLayout& layout,
                  const std::vector<NodeVertices>& nodes, GraphBuilder& b) {
  if (layout.tiers == 0) return;
  const std::vector<Vertex> leaves = add_leaves(layout, b);
  attach_nics(f, layout, nodes, leaves, b);
  if (layout.tiers == 2) {
    add_spines(f, layout, leaves, b);
  } else {
    add_pods(f, layout, leaves, b);
  }
}

}  // namespace orrery::topologies::detail
