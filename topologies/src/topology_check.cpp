// check_graph and to_dot.
#include <algorithm>
#include <boost/pending/disjoint_sets.hpp>
#include <map>
#include <set>
#include <sstream>

#include "orrery/base/units.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::topologies {
namespace {

// Union-find over vertex indices.
class Components {
 public:
  explicit Components(size_t n) : parent_(n) {
    for (size_t i = 0; i < n; ++i) parent_[i] = i;
  }
  size_t find(size_t v) {
    while (parent_[v] != v) v = parent_[v] = parent_[parent_[v]];
    return v;
  }
  void join(size_t a, size_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<size_t> parent_;
};

void check_edges(const Graph& g, std::vector<std::string>& problems) {
  for (const Edge& e : boost::make_iterator_range(boost::edges(g))) {
    const Vertex u = boost::source(e, g), v = boost::target(e, g);
    if (!(g[e].bandwidth_bytes_per_s > 0)) {
      problems.push_back("link " + g[u].name + " -> " + g[v].name + " has no bandwidth");
    }
    if (!boost::edge(v, u, g).second) {
      problems.push_back("link " + g[u].name + " -> " + g[v].name + " has no reverse direction");
    }
  }
  for (Vertex v : boost::make_iterator_range(boost::vertices(g))) {
    if (boost::out_degree(v, g) == 0 && boost::in_degree(v, g) == 0) {
      problems.push_back(g[v].name + " has no links");
    }
  }
}

// Devices reach each other through non-device vertices only (they do not forward), or over a
// direct link. Each device touches some components of the graph without devices; all pairs
// connect when one component touches every device, otherwise pairs are checked one by one.
void check_device_reachability(const Topology& t, std::vector<std::string>& problems) {
  const Graph& g = t.graph();
  const size_t n = boost::num_vertices(g);
  Components all(n), relay(n);
  for (const Edge& e : boost::make_iterator_range(boost::edges(g))) {
    const Vertex u = boost::source(e, g), v = boost::target(e, g);
    all.join(u, v);
    if (g[u].kind != VertexKind::kDevice && g[v].kind != VertexKind::kDevice) relay.join(u, v);
  }
  std::set<size_t> roots;
  for (size_t v = 0; v < n; ++v) roots.insert(all.find(v));
  if (roots.size() > 1)
    problems.push_back("the graph has " + std::to_string(roots.size()) + " disconnected parts");

  std::vector<std::set<size_t>> touches(static_cast<size_t>(t.num_devices()));
  std::map<size_t, int64_t> devices_touching;
  for (int64_t d = 0; d < t.num_devices(); ++d) {
    for (Vertex w : boost::make_iterator_range(boost::adjacent_vertices(t.device(d).vertex, g))) {
      if (g[w].kind != VertexKind::kDevice) touches[static_cast<size_t>(d)].insert(relay.find(w));
    }
    for (size_t c : touches[static_cast<size_t>(d)]) ++devices_touching[c];
  }
  for (const auto& [component, count] : devices_touching) {
    if (count == t.num_devices()) return;
  }
  for (int64_t a = 0; a < t.num_devices(); ++a) {
    for (int64_t b = a + 1; b < t.num_devices(); ++b) {
      const auto& ta = touches[static_cast<size_t>(a)];
      const auto& tb = touches[static_cast<size_t>(b)];
      const bool shared =
          std::any_of(ta.begin(), ta.end(), [&](size_t c) { return tb.contains(c); });
      if (!shared && !boost::edge(t.device(a).vertex, t.device(b).vertex, g).second) {
        problems.push_back("device " + g[t.device(a).vertex].name + " cannot reach " +
                           g[t.device(b).vertex].name);
        return;
      }
    }
  }
}

const char* dot_shape(VertexKind kind) {
  switch (kind) {
    case VertexKind::kDevice:
      return "box";
    case VertexKind::kNic:
      return "ellipse";
    case VertexKind::kHost:
      return "house";
    default:
      return "diamond";
  }
}

}  // namespace

std::vector<std::string> check_graph(const Topology& topology) {
  std::vector<std::string> problems;
  if (topology.num_devices() == 0) problems.push_back("the cluster has no devices");
  check_edges(topology.graph(), problems);
  check_device_reachability(topology, problems);
  return problems;
}

std::string to_dot(const Topology& topology, int64_t max_nodes) {
  const Graph& g = topology.graph();
  // The first nodes, then the shared switches (node -1: NVLink domains, fabric) within three
  // hops of them: leaf, spine or aggregation, core.
  std::vector<char> drawn(boost::num_vertices(g), 0);
  for (Vertex v : boost::make_iterator_range(boost::vertices(g))) {
    drawn[v] = g[v].node >= 0 && g[v].node < max_nodes;
  }
  for (int level = 0; level < 3; ++level) {
    std::vector<char> next = drawn;
    for (const Edge& e : boost::make_iterator_range(boost::edges(g))) {
      const Vertex u = boost::source(e, g), v = boost::target(e, g);
      if (drawn[u] && g[v].node < 0) next[v] = 1;
    }
    drawn = std::move(next);
  }
  int64_t nodes = 0;
  for (Vertex v : boost::make_iterator_range(boost::vertices(g)))
    nodes = std::max<int64_t>(nodes, g[v].node + 1);
  std::ostringstream out;
  out << "graph \"" << topology.spec().name() << "\" {\n";
  if (nodes > max_nodes) {
    // Said in the picture itself, so a partial drawing is never taken for the whole cluster.
    out << "  label=\"the first " << max_nodes << " of " << nodes
        << " nodes and their fabric (--max-nodes)\";\n  labelloc=t;\n";
  }
  for (Vertex v : boost::make_iterator_range(boost::vertices(g))) {
    if (drawn[v]) {
      out << "  v" << v << " [label=\"" << g[v].name << "\", shape=" << dot_shape(g[v].kind)
          << "];\n";
    }
  }
  // One undirected line per link: the u < v direction.
  for (const Edge& e : boost::make_iterator_range(boost::edges(g))) {
    const Vertex u = boost::source(e, g), v = boost::target(e, g);
    if (u < v && drawn[u] && drawn[v]) {
      out << "  v" << u << " -- v" << v << " [label=\""
          << base::units::bandwidth(g[e].bandwidth_bytes_per_s)
          << "\", class=" << to_string(g[e].kind) << "];\n";
    }
  }
  out << "}\n";
  return out.str();
}

}  // namespace orrery::topologies
