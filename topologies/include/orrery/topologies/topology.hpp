// The expanded cluster as a graph (Boost.Graph): every device, switch, NIC and host bridge a
// vertex, every link direction an edge with its bandwidth and latency. Devices are numbered
// 0..N-1 in node-group order, node by node ("global device index"); the simulator maps ranks to
// these indices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "orrery/pb/cluster.pb.h"

namespace orrery::topologies {

enum class VertexKind { kDevice, kNvSwitch, kPcieSwitch, kHost, kNic, kLeaf, kSpine, kCore };
const char* to_string(VertexKind kind);

struct VertexInfo {
  VertexKind kind = VertexKind::kDevice;
  std::string name;     // "n3.gpu5", "n3.nic5", "leaf12", "spine0", ...
  int64_t node = -1;    // node index for in-node vertices, -1 for fabric switches
  int64_t device = -1;  // global device index for devices, else -1
};

enum class LinkKind { kNvLink, kPcie, kHostLink, kNetwork };
const char* to_string(LinkKind kind);

struct LinkInfo {
  LinkKind kind = LinkKind::kNetwork;
  double bandwidth_bytes_per_s = 0;  // this direction
  double latency_s = 0;              // propagation + the switch at its head, if any
};

using Graph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, VertexInfo, LinkInfo>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

struct DeviceInfo {
  Vertex vertex;
  int64_t node;             // global node index
  int64_t local_index;      // index inside its node
  int node_group;           // index into ClusterSpec.node_groups
  std::string device_type;  // DeviceSpec name
  // Devices with the same id share an NVLink fabric (an NVSwitch, possibly spanning several nodes
  // of a domain, or a node's direct mesh); they talk over NVLink only. -1: no NVLink.
  int64_t nvlink_domain = -1;
};

class Topology {
 public:
  // Expands a validated cluster spec.
  explicit Topology(const pb::ClusterSpec& cluster);

  const pb::ClusterSpec& spec() const { return spec_; }
  const Graph& graph() const { return graph_; }
  int64_t num_devices() const { return static_cast<int64_t>(devices_.size()); }
  int64_t num_nodes() const { return num_nodes_; }
  const DeviceInfo& device(int64_t index) const { return devices_.at(static_cast<size_t>(index)); }
  const std::vector<DeviceInfo>& devices() const { return devices_; }

 private:
  pb::ClusterSpec spec_;
  Graph graph_;
  std::vector<DeviceInfo> devices_;
  int64_t num_nodes_ = 0;
};

// Structural checks of an expanded graph (connected, every device reaches every other, no
// dangling ports): a list of problems, empty when sound.
std::vector<std::string> check_graph(const Topology& topology);

// Graphviz dot of the graph; clusters larger than `max_nodes` nodes are drawn with the first
// `max_nodes` nodes and their fabric only.
std::string to_dot(const Topology& topology, int64_t max_nodes = 4);

}  // namespace orrery::topologies
