// NCCL-like collective cost model: a collective on a group of devices is decomposed the way NCCL
// runs it (ring, tree, NVLS on NVSwitch systems; Simple, LL, LL128 protocols; channels;
// hierarchical across nodes), each candidate gets an alpha-beta time from the links the topology
// gives it, and the algorithm/protocol NCCL would pick (the fastest, as its tuner does) is used
// unless pinned. Times are for an uncontended fabric; the `des` engine adds contention.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

namespace detail {
struct CollectiveGroup;
}

// The message rounds of a collective of `kind` on `ranks` ranks, as a ring runs it: all-reduce
// 2(n-1) (reduce-scatter then all-gather), all-gather, reduce-scatter and all-to-all n-1, any
// other kind 1. Each round waits for a peer's message (BlockingOverhead.per_round_s).
int64_t message_rounds(pb::CollectiveKind kind, int64_t ranks);

// kAllPairs: RCCL's MSCCL all-pairs all-reduce (a direct reduce-scatter and a direct all-gather,
// every rank to every peer at once), which RCCL runs instead of its tuner's choice where it
// applies (docs/collectives.md).
enum class CollectiveAlgorithm { kRing, kTree, kNvls, kDirect, kAllPairs };
enum class CollectiveProtocol { kSimple, kLL, kLL128 };
const char* to_string(CollectiveAlgorithm a);
const char* to_string(CollectiveProtocol p);

struct CollectivePin {
  std::optional<CollectiveAlgorithm> algorithm;
  std::optional<CollectiveProtocol> protocol;
};

struct CollectiveCost {
  double seconds = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  CollectiveProtocol protocol = CollectiveProtocol::kSimple;
  int channels = 1;
  // Bytes each rank puts on its slowest link class (for the DES engine's flows and for reports).
  double bytes_on_wire_per_rank = 0;
};

class CollectiveCostModel {
 public:
  // `calibration` (optional) overrides latency/bandwidth per scope and collective kind: a
  // CommCurve whose scope is "intra_node" (the group stays inside one NVLink domain or node) or
  // "inter_node" (it crosses the network) and whose collective is `kind` makes the time
  // latency_s + bytes * busbw_factor / bandwidth_bytes_per_s, with nccl-tests' bus-bandwidth
  // factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; else 1),
  // times the curve's correction by message size (size_correction).
  // A curve with collective UNSPECIFIED calibrates point-to-point transfers (bytes / bandwidth).
  explicit CollectiveCostModel(const topologies::Topology& topology,
                               const pb::CalibrationProfile* calibration = nullptr);

  // `devices`: global device indices of the group, in group-rank order (size >= 1; size 1
  // costs nothing). `bytes`: the buffer size as nccl-tests reports it (all_gather: the output
  // size; reduce_scatter: the input size; all_to_all: the whole send buffer).
  CollectiveCost estimate(pb::CollectiveKind kind, const std::vector<int64_t>& devices,
                          double bytes, const CollectivePin& pin = {}) const;

  // What a collective of `kind` on `devices` costs beyond estimate() when a rank issues it in line
  // with its compute (the blocking TP/EP collectives on the compute stream): the calibrated
  // BlockingOverhead of the group's scope, per collective plus per message round of the kind
  // (message_rounds), 0
  // without one (uncalibrated, the simulator assumes an idle communication engine).
  double blocking_overhead_s(pb::CollectiveKind kind, const std::vector<int64_t>& devices) const;

  // One point-to-point transfer (pipeline send/recv, ring-attention KV exchange), in a
  // communicator of the two devices alone (what PyTorch's ProcessGroupNCCL creates for a pair's
  // send/recv).
  double p2p_seconds(int64_t src_device, int64_t dst_device, double bytes) const;
  // The same inside an NCCL communicator of `communicator` (which holds both devices; nccl-tests'
  // sendrecv runs in one of all its ranks): NCCL splits the transfer over fewer channels the
  // more ranks the communicator has (docs/collectives.md).
  double p2p_seconds(int64_t src_device, int64_t dst_device, double bytes,
                     const std::vector<int64_t>& communicator) const;

  // The CommCurve scope a calibration must name to replace this group's costs: "intra_node"
  // when the group stays inside one NVLink domain or node (every group of a single-host cluster,
  // `local` included), else "inter_node".
  std::string calibration_scope(const std::vector<int64_t>& devices) const;

  // Whether NCCL's NVLS algorithm (NVSwitch in-switch reduction) can run on this group.
  bool nvls_available(const std::vector<int64_t>& devices) const;

  const topologies::Topology& topology() const { return topology_; }

  // Corrections by message size (docs/calibration.md): the curve's size points of a group of
  // `ranks` blended by their distance from `bytes` in octaves; 1 without any.
  static double size_correction(const pb::CommCurve& curve, int64_t ranks, double bytes);

  // A calibrated curve's time for `bytes` on `ranks` ranks: latency_s + bytes x the curve kind's
  // bus factor / bandwidth, times size_correction (a send/recv curve: factor 1, no points).
  static double curve_seconds(const pb::CommCurve& curve, int64_t ranks, double bytes);

  // The profile's CommCurve for this scope and kind; null when it has none.
  static const pb::CommCurve* calibrated_curve(const pb::CalibrationProfile& profile,
                                               const std::string& scope, pb::CollectiveKind kind);

 private:
  const pb::CommCurve* calibrated(const std::string& scope, pb::CollectiveKind kind) const;
  struct GroupCache;
  const detail::CollectiveGroup& group(const std::vector<int64_t>& devices) const;

  const topologies::Topology& topology_;
  const pb::CalibrationProfile* calibration_;
  // Groups already described (routes looked up), keyed by their devices: a plan asks about the
  // same few groups thousands of times. Shared and locked, so one model serves many threads.
  std::shared_ptr<GroupCache> cache_;
};

}  // namespace orrery::sim
