// The algorithms NCCL runs a collective with, each as an alpha-beta time on a described group:
// ring, tree and NVLS (NVSwitch SHARP) for all-reduce; ring for all-gather, reduce-scatter,
// broadcast and reduce; direct peer-to-peer exchange for all-to-all and send/recv. Each
// algorithm is costed with every protocol it supports (LL, LL128, Simple). On a group where RCCL
// runs MSCCL, its all-pairs all-reduce too.
#pragma once

#include <vector>

#include "orrery/pb/exec_graph.pb.h"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/sim/collective_group.hpp"

namespace orrery::sim::detail {

struct CollectiveCandidate {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  CollectiveProtocol protocol = CollectiveProtocol::kSimple;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;  // what the `bytes` of the call move at
  double bytes = 0;                  // the call's size as nccl-tests reports it
  double wire_bytes_per_rank = 0;    // bytes one rank sends on its bottleneck link class
  int channels = 1;
  // RCCL runs it ahead of its tuner: an MSCCL algorithm whose size window holds the call.
  bool preempts = false;
  double seconds() const;
};

// Every (algorithm, protocol) NCCL could run `kind` with on `group`; never empty.
std::vector<CollectiveCandidate> collective_candidates(pb::CollectiveKind kind,
                                                       const CollectiveGroup& group, double bytes);

// The NCCL communicator a point-to-point transfer runs in: how many ranks it has and whether it
// spans several islands (NCCL splits a transfer over channels by both).
struct P2pCommunicator {
  int64_t ranks = 2;
  bool multi_island = false;
};

// One transfer between two ranks, `same_island` over NVLink/PCIe, else through one NIC.
CollectiveCandidate p2p_candidate(const CollectiveGroup& group, bool same_island, double bytes,
                                  const P2pCommunicator& communicator);

// Channels NCCL splits one in-island NVLink transfer of `bytes` over (exposed for tests).
int nvlink_p2p_channels(double bytes, const P2pCommunicator& communicator);

// nccl-tests' bus-bandwidth factor of a collective on n ranks: all_reduce 2(n-1)/n, all_gather,
// reduce_scatter and all_to_all (n-1)/n, broadcast and reduce 1.
double bus_factor(pb::CollectiveKind kind, int64_t ranks);

// Kernel launch and completion around every NCCL call as nccl-tests times it.
double launch_overhead_s();

}  // namespace orrery::sim::detail
