// Shortest-path routing with ECMP. Rules:
//   - Devices do not forward: a path may leave a device only at its source.
//   - Two devices of one NVLink fabric (same nvlink_domain) talk over NVLink edges only, as
//     NCCL does (NVLink P2P beats PCIe P2P, so it never picks the PCIe path).
//   - Equal cost = fewest hops, then lowest total latency: all fewest-hop paths are enumerated
//     in graph order (capped at kEnumerateLimit), those slower than the fastest are dropped (a
//     detour through a node's host to reach a NIC on another PCIe switch has as many hops as a
//     climb to the spines, but pays two more PCIe crossings), and the first `max_paths` kept.
#include "orrery/topologies/routing.hpp"

#include <algorithm>
#include <deque>
#include <limits>

#include "orrery/base/error.hpp"

namespace orrery::topologies {
namespace {

constexpr size_t kEnumerateLimit = 4096;

struct RouteRules {
  const Graph& g;
  Vertex src;
  bool nvlink_only;
  bool may_leave(Vertex v) const { return v == src || g[v].kind != VertexKind::kDevice; }
  bool may_use(const Edge& e) const { return !nvlink_only || g[e].kind == LinkKind::kNvLink; }
};

RouteRules rules_for(const Topology& t, int64_t src, int64_t dst) {
  const DeviceInfo& a = t.device(src);
  const DeviceInfo& b = t.device(dst);
  return {t.graph(), a.vertex, a.nvlink_domain >= 0 && a.nvlink_domain == b.nvlink_domain};
}

// Hop distance from the source to every vertex up to the target's level; -1 unreached.
std::vector<int> hop_distances(const RouteRules& r, Vertex dst) {
  std::vector<int> dist(boost::num_vertices(r.g), -1);
  std::deque<Vertex> queue{r.src};
  dist[r.src] = 0;
  while (!queue.empty()) {
    const Vertex v = queue.front();
    queue.pop_front();
    if (dist[dst] >= 0 && dist[v] >= dist[dst]) break;
    if (!r.may_leave(v)) continue;
    for (const Edge& e : boost::make_iterator_range(boost::out_edges(v, r.g))) {
      const Vertex w = boost::target(e, r.g);
      if (dist[w] < 0 && r.may_use(e)) {
        dist[w] = dist[v] + 1;
        queue.push_back(w);
      }
    }
  }
  return dist;
}

// Walks back from the target over edges that descend one hop level.
void enumerate(const RouteRules& r, const std::vector<int>& dist, Vertex v,
               std::vector<Edge>& suffix, std::vector<std::vector<Edge>>& out) {
  if (out.size() >= kEnumerateLimit) return;
  if (v == r.src) {
    out.emplace_back(suffix.rbegin(), suffix.rend());
    return;
  }
  for (const Edge& e : boost::make_iterator_range(boost::in_edges(v, r.g))) {
    const Vertex u = boost::source(e, r.g);
    if (dist[u] >= 0 && dist[u] + 1 == dist[v] && r.may_use(e) && r.may_leave(u)) {
      suffix.push_back(e);
      enumerate(r, dist, u, suffix, out);
      suffix.pop_back();
    }
  }
}

Route make_route(const Graph& g, std::vector<Edge> edges) {
  Route route;
  route.bottleneck_bytes_per_s = std::numeric_limits<double>::infinity();
  for (const Edge& e : edges) {
    route.latency_s += g[e].latency_s;
    route.bottleneck_bytes_per_s =
        std::min(route.bottleneck_bytes_per_s, g[e].bandwidth_bytes_per_s);
  }
  route.edges = std::move(edges);
  return route;
}

void check_index(const Topology& t, int64_t device) {
  ORRERY_CHECK(device >= 0 && device < t.num_devices(), "device index " + std::to_string(device) +
                                                            " outside 0.." +
                                                            std::to_string(t.num_devices() - 1));
}

}  // namespace

std::vector<Route> ecmp_routes(const Topology& topology, int64_t src, int64_t dst,
                               size_t max_paths) {
  check_index(topology, src);
  check_index(topology, dst);
  if (src == dst || max_paths == 0) return {};
  const RouteRules rules = rules_for(topology, src, dst);
  const Vertex target = topology.device(dst).vertex;
  const std::vector<int> dist = hop_distances(rules, target);
  if (dist[target] < 0) return {};
  std::vector<std::vector<Edge>> paths;
  std::vector<Edge> suffix;
  enumerate(rules, dist, target, suffix, paths);
  std::vector<Route> routes;
  routes.reserve(paths.size());
  for (auto& p : paths) routes.push_back(make_route(topology.graph(), std::move(p)));
  std::stable_sort(routes.begin(), routes.end(),
                   [](const Route& a, const Route& b) { return a.latency_s < b.latency_s; });
  // Sums of the same latencies in another order may differ in the last bits.
  const double slowest_equal = routes.front().latency_s * (1 + 1e-9);
  std::erase_if(routes, [&](const Route& r) { return r.latency_s > slowest_equal; });
  if (routes.size() > max_paths) routes.resize(max_paths);
  return routes;
}

Route route(const Topology& topology, int64_t src, int64_t dst, uint64_t flow_hash) {
  if (src == dst) {
    check_index(topology, src);
    return {};
  }
  std::vector<Route> routes = ecmp_routes(topology, src, dst);
  ORRERY_CHECK(!routes.empty(), "no route from device " + std::to_string(src) + " to " +
                                    std::to_string(dst) + " in a checked topology");
  return std::move(routes[flow_hash % routes.size()]);
}

double pair_bottleneck_bandwidth(const Topology& topology, int64_t src, int64_t dst) {
  double best = 0;
  for (const Route& r : ecmp_routes(topology, src, dst))
    best = std::max(best, r.bottleneck_bytes_per_s);
  return best;
}

}  // namespace orrery::topologies
