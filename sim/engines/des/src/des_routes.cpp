// Router (des_internal.hpp). Inside a node or an NVLink fabric the route is orrery's own
// (topologies::route); between nodes it is the cheapest combination of (device -> NIC inside the
// source node, NIC -> leaf -> ... -> leaf -> NIC over the fabric switches, NIC -> device inside
// the destination node), which is the fewest-hop route with the lowest latency because every
// path between two nodes leaves through a NIC and crossing a third node is never shorter than
// the fabric (its NIC, PCIe and NIC edges cost more latency than switch hops).
#include <algorithm>
#include <deque>
#include <limits>

#include "des_internal.hpp"
#include "orrery/base/error.hpp"
#include "orrery/topologies/routing.hpp"

namespace orrery::sim::des {
namespace {

using topologies::Edge;
using topologies::Graph;
using topologies::Vertex;
using topologies::VertexKind;

bool is_fabric(VertexKind k) {
  return k == VertexKind::kLeaf || k == VertexKind::kSpine || k == VertexKind::kCore;
}

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

// A device's way to one NIC of its node (or from it, for the destination side).
struct Exit {
  Vertex nic;
  int nic_index;  // among the node's NICs, in graph order
  int hops;
  double latency_s;
  std::vector<int32_t> edges;  // in travel order
};

}  // namespace

struct Router::Impl {
  const topologies::Topology& t;
  const Graph& g;
  std::vector<const topologies::LinkInfo*> links;
  std::vector<char> between_switches;  // per edge: both ends are fabric switches
  std::unordered_map<const void*, int32_t> edge_id;
  std::vector<int32_t> fabric_index;  // vertex -> index among fabric vertices, -1 otherwise
  std::vector<Vertex> fabric_vertices;
  std::unordered_map<int32_t, std::vector<int>> fabric_dist;  // per source fabric index
  std::unordered_map<int64_t, std::vector<Exit>> up, down;
  std::unordered_map<int64_t, int64_t> devices_per_node;
  std::unordered_map<uint64_t, std::vector<int32_t>> cache;

  explicit Impl(const topologies::Topology& topology) : t(topology), g(topology.graph()) {
    for (const Edge& e : boost::make_iterator_range(boost::edges(g))) {
      edge_id.emplace(&g[e], static_cast<int32_t>(links.size()));
      links.push_back(&g[e]);
      between_switches.push_back(is_fabric(g[boost::source(e, g)].kind) &&
                                 is_fabric(g[boost::target(e, g)].kind));
    }
    fabric_index.assign(boost::num_vertices(g), -1);
    for (Vertex v = 0; v < boost::num_vertices(g); ++v) {
      if (is_fabric(g[v].kind)) {
        fabric_index[v] = static_cast<int32_t>(fabric_vertices.size());
        fabric_vertices.push_back(v);
      }
    }
    for (const auto& d : t.devices()) ++devices_per_node[d.node];
  }

  int32_t id(const Edge& e) const { return edge_id.at(&g[e]); }

  // Shortest (hops, then latency) in-node paths from a device to each NIC of its node
  // (`outward`), or from each NIC to the device.
  std::vector<Exit> exits(int64_t device, bool outward) const {
    const auto& info = t.device(device);
    const Vertex start = info.vertex;
    const int64_t node = info.node;
    const size_t n = boost::num_vertices(g);
    std::unordered_map<Vertex, std::pair<int, double>> best;  // hops, latency
    std::unordered_map<Vertex, Edge> pred;
    best[start] = {0, 0.0};
    std::vector<Vertex> layer{start};
    std::vector<Vertex> nics;
    for (int hops = 1; !layer.empty(); ++hops) {
      std::vector<Vertex> next;
      for (Vertex v : layer) {
        if (v != start && g[v].kind == VertexKind::kDevice) continue;  // devices do not forward
        auto visit = [&](const Edge& e, Vertex w) {
          if (g[w].node != node || is_fabric(g[w].kind)) return;
          const double lat = best[v].second + g[e].latency_s;
          auto it = best.find(w);
          if (it == best.end()) {
            best[w] = {hops, lat};
            pred[w] = e;
            next.push_back(w);
            if (g[w].kind == VertexKind::kNic) nics.push_back(w);
          } else if (it->second.first == hops && lat < it->second.second) {
            it->second.second = lat;
            pred[w] = e;
          }
        };
        if (outward) {
          for (const Edge& e : boost::make_iterator_range(boost::out_edges(v, g)))
            visit(e, boost::target(e, g));
        } else {
          for (const Edge& e : boost::make_iterator_range(boost::in_edges(v, g)))
            visit(e, boost::source(e, g));
        }
      }
      layer = std::move(next);
    }
    (void)n;
    std::sort(nics.begin(), nics.end());
    std::vector<Exit> out;
    for (size_t i = 0; i < nics.size(); ++i) {
      Exit x{nics[i], static_cast<int>(i), best[nics[i]].first, best[nics[i]].second, {}};
      for (Vertex v = nics[i]; v != start;) {
        const Edge e = pred.at(v);
        x.edges.push_back(id(e));
        v = outward ? boost::source(e, g) : boost::target(e, g);
      }
      if (outward) std::reverse(x.edges.begin(), x.edges.end());
      out.push_back(std::move(x));
    }
    return out;
  }

  const std::vector<Exit>& exits_cached(int64_t device, bool outward) {
    auto& m = outward ? up : down;
    auto it = m.find(device);
    if (it == m.end()) it = m.emplace(device, exits(device, outward)).first;
    return it->second;
  }

  // The NIC's edge to (outward) or from its leaf.
  std::pair<Edge, Vertex> nic_link(Vertex nic, bool outward) const {
    if (outward) {
      for (const Edge& e : boost::make_iterator_range(boost::out_edges(nic, g))) {
        if (fabric_index[boost::target(e, g)] >= 0) return {e, boost::target(e, g)};
      }
    } else {
      for (const Edge& e : boost::make_iterator_range(boost::in_edges(nic, g))) {
        if (fabric_index[boost::source(e, g)] >= 0) return {e, boost::source(e, g)};
      }
    }
    return {Edge(), boost::graph_traits<Graph>::null_vertex()};
  }

  const std::vector<int>& dist_from(Vertex leaf) {
    const int32_t s = fabric_index[leaf];
    auto it = fabric_dist.find(s);
    if (it != fabric_dist.end()) return it->second;
    std::vector<int> dist(fabric_vertices.size(), -1);
    std::deque<Vertex> q{leaf};
    dist[static_cast<size_t>(s)] = 0;
    while (!q.empty()) {
      const Vertex v = q.front();
      q.pop_front();
      for (const Edge& e : boost::make_iterator_range(boost::out_edges(v, g))) {
        const int32_t w = fabric_index[boost::target(e, g)];
        if (w >= 0 && dist[static_cast<size_t>(w)] < 0) {
          dist[static_cast<size_t>(w)] = dist[static_cast<size_t>(fabric_index[v])] + 1;
          q.push_back(boost::target(e, g));
        }
      }
    }
    return fabric_dist.emplace(s, std::move(dist)).first->second;
  }

  // Walks back from `to` over edges that descend one level, picking among equal choices by hash.
  std::vector<int32_t> fabric_path(Vertex from, Vertex to, uint64_t hash) {
    const std::vector<int>& dist = dist_from(from);
    std::vector<int32_t> out;
    for (Vertex v = to; v != from;) {
      std::vector<Edge> choices;
      const int dv = dist[static_cast<size_t>(fabric_index[v])];
      for (const Edge& e : boost::make_iterator_range(boost::in_edges(v, g))) {
        const int32_t u = fabric_index[boost::source(e, g)];
        if (u >= 0 && dist[static_cast<size_t>(u)] == dv - 1) choices.push_back(e);
      }
      ORRERY_CHECK(!choices.empty(), "fabric path lost its way");
      hash = mix(hash + 1);
      const Edge e = choices[hash % choices.size()];
      out.push_back(id(e));
      v = boost::source(e, g);
    }
    std::reverse(out.begin(), out.end());
    return out;
  }

  std::vector<int32_t> via_orrery(int64_t src, int64_t dst) const {
    std::vector<int32_t> out;
    for (const Edge& e : topologies::route(t, src, dst).edges) out.push_back(id(e));
    return out;
  }

  std::vector<int32_t> self_route(int64_t device) const {
    const Vertex v = t.device(device).vertex;
    for (const Edge& e : boost::make_iterator_range(boost::out_edges(v, g))) {
      const Vertex sw = boost::target(e, g);
      if (g[sw].kind != VertexKind::kNvSwitch) continue;
      for (const Edge& back : boost::make_iterator_range(boost::out_edges(sw, g))) {
        if (boost::target(back, g) == v) return {id(e), id(back)};
      }
    }
    return {};
  }

  int affinity(int64_t device, size_t nics) const {
    const auto& d = t.device(device);
    return static_cast<int>(d.local_index * static_cast<int64_t>(nics) /
                            devices_per_node.at(d.node));
  }

  std::vector<int32_t> compute(int64_t src, int64_t dst) {
    if (src == dst) return self_route(src);
    const auto& a = t.device(src);
    const auto& b = t.device(dst);
    if (a.node == b.node || (a.nvlink_domain >= 0 && a.nvlink_domain == b.nvlink_domain)) {
      return via_orrery(src, dst);
    }
    const std::vector<Exit>& ups = exits_cached(src, true);
    const std::vector<Exit>& downs = exits_cached(dst, false);
    const int aff_a = affinity(src, ups.size()), aff_b = affinity(dst, downs.size());
    const Exit* best_u = nullptr;
    const Exit* best_d = nullptr;
    std::tuple<int, double, int> best{std::numeric_limits<int>::max(), 0.0, 0};
    for (const Exit& u : ups) {
      const auto [ue, leaf_u] = nic_link(u.nic, true);
      if (leaf_u == boost::graph_traits<Graph>::null_vertex()) continue;
      const std::vector<int>& dist = dist_from(leaf_u);
      for (const Exit& d : downs) {
        const auto [de, leaf_d] = nic_link(d.nic, false);
        if (leaf_d == boost::graph_traits<Graph>::null_vertex()) continue;
        const int fd = dist[static_cast<size_t>(fabric_index[leaf_d])];
        if (fd < 0) continue;
        const int hops = u.hops + 2 + fd + d.hops;
        const double lat = u.latency_s + g[ue].latency_s + g[de].latency_s + d.latency_s;
        const int miss = (u.nic_index != aff_a) + (d.nic_index != aff_b);
        const auto& [bh, bl, bm] = best;
        const bool better =
            hops < bh ||
            (hops == bh && (lat < bl * (1 - 1e-9) || (lat <= bl * (1 + 1e-9) && miss < bm)));
        if (better) best = {hops, lat, miss}, best_u = &u, best_d = &d;
      }
    }
    if (best_u == nullptr) return via_orrery(src, dst);
    const auto [ue, leaf_u] = nic_link(best_u->nic, true);
    const auto [de, leaf_d] = nic_link(best_d->nic, false);
    std::vector<int32_t> out = best_u->edges;
    out.push_back(id(ue));
    const uint64_t hash =
        mix(static_cast<uint64_t>(src) * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(dst));
    for (int32_t e : fabric_path(leaf_u, leaf_d, hash)) out.push_back(e);
    out.push_back(id(de));
    out.insert(out.end(), best_d->edges.begin(), best_d->edges.end());
    return out;
  }
};

Router::Router(const topologies::Topology& topology) : impl_(std::make_unique<Impl>(topology)) {}
Router::~Router() = default;

const std::vector<int32_t>& Router::route(int64_t src, int64_t dst) {
  const uint64_t key = (static_cast<uint64_t>(src) << 32) | static_cast<uint64_t>(dst);
  auto it = impl_->cache.find(key);
  if (it == impl_->cache.end()) it = impl_->cache.emplace(key, impl_->compute(src, dst)).first;
  return it->second;
}

const topologies::LinkInfo& Router::link(int32_t edge) const {
  return *impl_->links[static_cast<size_t>(edge)];
}

bool Router::between_switches(int32_t edge) const {
  return impl_->between_switches[static_cast<size_t>(edge)] != 0;
}

int32_t Router::num_edges() const { return static_cast<int32_t>(impl_->links.size()); }

}  // namespace orrery::sim::des
