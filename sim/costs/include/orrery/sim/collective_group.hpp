// What the collective cost model needs to know about a group of devices, read off the topology:
// how the ranks spread over NVLink islands and nodes, the per-rank bandwidth of each link class,
// and the latency of one hop inside an island and across the network.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "orrery/topologies/topology.hpp"

namespace orrery::sim::detail {

struct CollectiveGroup {
  int64_t ranks = 1;
  // An island is a set of devices that talk without the scale-out network: an NVLink domain
  // (an NVSwitch node, a GB200 NVL72 rack, a mesh node) or, without NVLink, one node.
  int64_t islands = 1;
  int64_t ranks_per_island = 1;  // the most ranks of the group in one island
  int64_t ranks_per_node = 1;    // the most ranks of the group in one physical node
  // One rank's bandwidth into its island, per direction: the NVSwitch device link, all of its
  // mesh links together, or its PCIe path (bytes/s); and to one peer of the island.
  double intra_rank_bytes_per_s = 0;
  double intra_pair_bytes_per_s = 0;
  bool nvls = false;      // NVSwitch SHARP (NVLink multicast/reduction) available in the island
  bool nvswitch = false;  // the island is an NVSwitch fabric (NCCL's NVLink p2p chunking applies)
  // RCCL runs its MSCCL all-pairs all-reduce here: the group is exactly the 8 AMD GPUs of one
  // fully meshed node (the shape RCCL's MI300X topology model enables MSCCL for, and the rank
  // count of its all-pairs algorithm files; docs/collectives.md).
  bool msccl_all_pairs = false;
  // Scale-out, over the transport's network devices (topologies/transport.hpp: port rate x
  // efficiency x NICs striped per GPU): the bandwidth one island can use (each node's devices,
  // at most one per rank of the group on that node), and one rank's share of its node's.
  double island_nic_bytes_per_s = 0;
  double rank_nic_bytes_per_s = 0;
  double pair_nic_bytes_per_s = 0;   // one NIC: what a single peer-to-peer stream can use
  double intra_hop_latency_s = 0;    // device to device inside an island
  double network_hop_latency_s = 0;  // the scale-out part of a route between two islands
};

// Island id of a device: its NVLink domain, or -(node + 1) when it has none.
int64_t island_of(const topologies::Topology& topology, int64_t device);

// Latency of the route from `src` to `dst` split into its in-node part (NVLink, PCIe, host)
// and its network part.
struct HopLatency {
  double intra_s = 0;
  double network_s = 0;
};
HopLatency hop_latency(const topologies::Topology& topology, int64_t src, int64_t dst);

// Hop latencies already routed, by (src, dst): a route across a large fabric is a breadth-first
// search of the whole graph (131,072 GPUs: about 1 ms), and the planner's thousands of distinct
// groups share a few dozen such pairs (their first rank and the first rank of another island).
using HopLatencyCache = std::map<std::pair<int64_t, int64_t>, HopLatency>;

// InputError-free: the caller has checked `devices` (non-empty, valid, distinct). `latencies`,
// when given, serves and keeps the hop latencies the description needs.
CollectiveGroup describe_group(const topologies::Topology& topology,
                               const std::vector<int64_t>& devices,
                               HopLatencyCache* latencies = nullptr);

}  // namespace orrery::sim::detail
