// Reads a device group's shape off the topology (see collective_group.hpp).
#include "orrery/sim/collective_group.hpp"

#include <algorithm>
#include <map>

#include "orrery/base/error.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/routing.hpp"
#include "orrery/topologies/transport.hpp"

namespace orrery::sim::detail {
namespace {

// Devices whose NVSwitch fabric does in-switch reductions (NVLink SHARP, "NVLS"): third-
// generation NVSwitch and later, i.e. Hopper and Blackwell HGX/DGX boards and NVL72 racks (NCCL
// enables its NVLS algorithm on these when the NVSwitch supports multicast). The device file's
// architecture decides, not its name.
bool nvls_architecture(const pb::DeviceSpec& device) {
  return device.architecture() == pb::DEVICE_ARCHITECTURE_HOPPER ||
         device.architecture() == pb::DEVICE_ARCHITECTURE_BLACKWELL;
}

// RCCL enables MSCCL through the topology model it matches (ROCm/rccl src/graph/rome_models.cc):
// of its 8-GPU, 7-xGMI-link, fully connected models only the one without NICs carries
// mscclEnabled=1, and a communicator that stays on one node whose GPUs are all xGMI-linked has
// its NICs trimmed before the match (src/graph/paths.cc, ncclTopoTrimSystem), so a single-node
// communicator of a full MI300X-class mesh gets it, one spanning nodes does not. Its all-pairs
// all-reduce files are written for exactly 8 ranks (tools/msccl-algorithms/
// allreduce-allpairs-8n-*.xml: ngpus="8"), and a file is used only by a communicator of that
// many ranks (src/misc/msccl/msccl_lifecycle.cc). RCCL's docs: "On MI300X, MSCCL is enabled by
// default" (docs/install/installation.rst): MI300X and MI325X are gfx942 parts, CDNA3.
constexpr int64_t kMscclAllPairsRanks = 8;

const pb::NodeType& node_type_of(const topologies::Topology& topology, int64_t device) {
  const pb::ClusterSpec& spec = topology.spec();
  const auto& group = spec.node_groups(topology.device(device).node_group);
  for (const auto& t : spec.node_types()) {
    if (t.name() == group.node_type()) return t;
  }
  ORRERY_CHECK(false, "node type " + group.node_type() + " of a validated cluster is missing");
}

// The first two ranks of the group in its fullest island (-1 when no island has two).
std::pair<int64_t, int64_t> pair_in_island(const topologies::Topology& topology,
                                           const std::vector<int64_t>& devices, int64_t island) {
  int64_t first = -1;
  for (int64_t d : devices) {
    if (island_of(topology, d) != island) continue;
    if (first < 0) {
      first = d;
    } else {
      return {first, d};
    }
  }
  return {first, -1};
}

}  // namespace

int64_t island_of(const topologies::Topology& topology, int64_t device) {
  const auto& info = topology.device(device);
  return info.nvlink_domain >= 0 ? info.nvlink_domain : -(info.node + 1);
}

HopLatency hop_latency(const topologies::Topology& topology, int64_t src, int64_t dst) {
  HopLatency out;
  if (src == dst) return out;
  const topologies::Route r = topologies::route(topology, src, dst);
  for (const auto& e : r.edges) {
    const auto& link = topology.graph()[e];
    (link.kind == topologies::LinkKind::kNetwork ? out.network_s : out.intra_s) += link.latency_s;
  }
  return out;
}

CollectiveGroup describe_group(const topologies::Topology& topology,
                               const std::vector<int64_t>& devices, HopLatencyCache* latencies) {
  const auto latency = [&](int64_t src, int64_t dst) {
    if (latencies == nullptr) return hop_latency(topology, src, dst);
    const auto [it, added] = latencies->try_emplace({src, dst});
    if (added) it->second = hop_latency(topology, src, dst);
    return it->second;
  };
  CollectiveGroup g;
  g.ranks = static_cast<int64_t>(devices.size());
  // Per node: how many of the group's ranks it holds, and the island of the first of them.
  std::map<int64_t, int64_t> per_island, per_node, node_island;
  for (int64_t d : devices) {
    const int64_t island = island_of(topology, d);
    ++per_island[island];
    ++per_node[topology.device(d).node];
    node_island.try_emplace(topology.device(d).node, island);
  }
  g.islands = static_cast<int64_t>(per_island.size());
  int64_t fullest = per_island.begin()->first;
  for (const auto& [island, count] : per_island) {
    if (count > g.ranks_per_island) {
      g.ranks_per_island = count;
      fullest = island;
    }
  }
  for (const auto& [node, count] : per_node) g.ranks_per_node = std::max(g.ranks_per_node, count);

  const int64_t first = devices.front();
  const pb::NodeType& type = node_type_of(topology, first);
  const pb::IntraNodeSpec& intra = type.intra();
  const auto [a, b] = pair_in_island(topology, devices, fullest);
  switch (intra.kind()) {
    case pb::INTRA_NODE_KIND_NVSWITCH:
    case pb::INTRA_NODE_KIND_HOST:
      g.intra_pair_bytes_per_s = intra.device_link().bandwidth_bytes_per_s();
      g.intra_rank_bytes_per_s = g.intra_pair_bytes_per_s;
      break;
    case pb::INTRA_NODE_KIND_MESH:
      // Rings and all-to-all spread over every direct link of the rank.
      g.intra_pair_bytes_per_s = intra.device_link().bandwidth_bytes_per_s();
      g.intra_rank_bytes_per_s = g.intra_pair_bytes_per_s *
                                 static_cast<double>(std::max<int64_t>(1, g.ranks_per_island - 1));
      break;
    default:
      g.intra_pair_bytes_per_s = b >= 0 ? topologies::pair_bottleneck_bandwidth(topology, a, b)
                                        : intra.pcie_link().bandwidth_bytes_per_s();
      g.intra_rank_bytes_per_s = g.intra_pair_bytes_per_s;
      break;
  }
  g.nvswitch = intra.kind() == pb::INTRA_NODE_KIND_NVSWITCH;
  g.nvls = g.nvswitch && g.ranks_per_island >= 2 &&
           nvls_architecture(topologies::find_device(topology.spec(), type.device()));
  if (b >= 0) g.intra_hop_latency_s = latency(a, b).intra_s;
  const pb::DeviceSpec* spec = topologies::lookup_device(topology.spec(), type.device());
  g.msccl_all_pairs = intra.kind() == pb::INTRA_NODE_KIND_MESH && spec != nullptr &&
                      spec->architecture() == pb::DEVICE_ARCHITECTURE_CDNA3 && g.islands == 1 &&
                      g.ranks == kMscclAllPairsRanks &&
                      type.devices_per_node() == kMscclAllPairsRanks;

  // The transport's network devices (a p5 GPU's four EFA NICs striped as one); without a
  // transport, the NICs as written.
  const topologies::NetDevices net = topologies::net_devices(type);
  const int64_t nics = net.count;
  const double nic_bw = net.bytes_per_s;
  g.pair_nic_bytes_per_s = nics > 0 ? nic_bw : 0;
  g.rank_nic_bytes_per_s = static_cast<double>(std::min(nics, g.ranks_per_node)) * nic_bw /
                           static_cast<double>(g.ranks_per_node);
  for (const auto& [node, count] : per_node) {
    if (node_island.at(node) != fullest) continue;
    g.island_nic_bytes_per_s += static_cast<double>(std::min(nics, count)) * nic_bw;
  }
  if (g.islands > 1) {
    const auto other = std::find_if(devices.begin(), devices.end(), [&](int64_t d) {
      return island_of(topology, d) != island_of(topology, first);
    });
    g.network_hop_latency_s = latency(first, *other).network_s;
  }
  return g;
}

}  // namespace orrery::sim::detail
