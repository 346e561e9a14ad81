// Max-flow between device sets on a capacity copy of the graph (Boost push-relabel). Devices do
// not forward here either: a device's out-edges count only when it is a source, its in-edges only
// when it is a sink; a super-source feeds the sources and a super-sink drains the sinks, each by
// the device's total link bandwidth (so the devices' own links, not the super edges, bind).
#include <boost/graph/push_relabel_max_flow.hpp>

#include "orrery/base/error.hpp"
#include "orrery/topologies/routing.hpp"

namespace orrery::topologies {
namespace {

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<
        boost::edge_capacity_t, double,
        boost::property<boost::edge_residual_capacity_t, double,
                        boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

class FlowBuilder {
 public:
  explicit FlowBuilder(size_t vertices) : g_(vertices) {}
  void arc(size_t u, size_t v, double capacity) {
    auto forward = boost::add_edge(u, v, g_).first;
    auto backward = boost::add_edge(v, u, g_).first;
    boost::put(boost::edge_capacity, g_, forward, capacity);
    boost::put(boost::edge_capacity, g_, backward, 0.0);
    boost::put(boost::edge_reverse, g_, forward, backward);
    boost::put(boost::edge_reverse, g_, backward, forward);
  }
  double run(size_t s, size_t t) { return boost::push_relabel_max_flow(g_, s, t); }

 private:
  FlowGraph g_;
};

}  // namespace

double max_flow_bandwidth(const Topology& topology, const std::vector<int64_t>& sources,
                          const std::vector<int64_t>& sinks) {
  const Graph& g = topology.graph();
  const size_t n = boost::num_vertices(g);
  std::vector<char> is_source(n, 0), is_sink(n, 0);
  for (int64_t d : sources) is_source[topology.device(d).vertex] = 1;
  for (int64_t d : sinks) is_sink[topology.device(d).vertex] = 1;
  if (sources.empty() || sinks.empty()) return 0;
  const size_t super_source = n, super_sink = n + 1;
  FlowBuilder flow(n + 2);
  std::vector<double> out_bw(n, 0), in_bw(n, 0);
  for (const Edge& e : boost::make_iterator_range(boost::edges(g))) {
    const Vertex u = boost::source(e, g), v = boost::target(e, g);
    const bool u_ok = g[u].kind != VertexKind::kDevice || is_source[u];
    const bool v_ok = g[v].kind != VertexKind::kDevice || is_sink[v];
    if (!u_ok || !v_ok) continue;
    flow.arc(u, v, g[e].bandwidth_bytes_per_s);
    out_bw[u] += g[e].bandwidth_bytes_per_s;
    in_bw[v] += g[e].bandwidth_bytes_per_s;
  }
  for (size_t v = 0; v < n; ++v) {
    if (is_source[v]) flow.arc(super_source, v, out_bw[v]);
    if (is_sink[v]) flow.arc(v, super_sink, in_bw[v]);
  }
  return flow.run(super_source, super_sink);
}

double bisection_bandwidth(const Topology& topology) {
  const int64_t n = topology.num_devices();
  if (n < 2) return 0;
  std::vector<int64_t> first, second;
  for (int64_t d = 0; d < n; ++d) (d < n / 2 ? first : second).push_back(d);
  return max_flow_bandwidth(topology, first, second);
}

}  // namespace orrery::topologies
