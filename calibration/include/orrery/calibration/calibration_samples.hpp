// From measured traces (orrery bench files, executor run traces, imported Kineto traces: all
// ExecGraphs with duration_s on their nodes) to the samples calibration fits.
//
// Compute nodes give one sample each, on the device their rank ran on, against the peak of the
// dtype they ran in (ExecNode.dtype, else the trace's plan precision; the fp32 peak when the
// device has none for it, as the cost model does). Collective nodes give one sample per
// collective instance: the same node name in the same process group on several ranks is one
// instance, timed by its fastest rank (the others also waited for late peers). Its scope is the
// one CollectiveCostModel looks up for its group on the trace's cluster (cluster_spec), or
// `comm_scope` for traces that carry no cluster. Collectives on the compute stream are blocking
// samples. Collectives on a communication stream are grouped into the stretches during which
// one of them was in flight; a stretch during which its rank computed does not measure
// communication alone: its collectives are no curve samples, and it is an OverlappedCommSample
// when the rank computed for at least kOverlapMeasured of it. A pipeline receive posted after
// its matching send (same peers and tag) started is a point-to-point sample: its node's time,
// the transfer alone with both ends posted; one posted first also waited for the sender and is
// left out. A rank that measured its untimed time
// (RankGraph.untimed_s) gives a dispatch sample: that time over the ops on its compute stream.
// A collective instance timed on every member of its group, all on one device, gives a skew
// sample: the members' mean time beyond the fastest, and the compute each ran since it last
// waited on the group (at a collective on its compute stream, or for one of another stream that
// its compute stream needed unfinished), as the engines count it. Each compute sample carries how
// many of the job's ranks computed on its host (ComputeSample.host_ranks), for host sharing.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::calibration {

struct SampleOptions {
  // Replaces the device of every rank (`orrery calibrate --device`); empty: the trace's own.
  std::string device;
  // Resolves device names for traces without cluster_spec, after their own and before the
  // built-in database (`--cluster`); may be null.
  const pb::ClusterSpec* cluster = nullptr;
  // Scope of collectives in traces without cluster_spec.
  std::string comm_scope = "intra_node";
};

struct TraceSamples {
  std::vector<ComputeSample> compute;
  std::vector<CommSample> comm;
  std::vector<OverlappedCommSample>
      overlapped_comm;                   // one per stretch of communication beside compute
  std::vector<DispatchSample> dispatch;  // one per rank that measured its untimed time
  std::vector<SkewSample> skew;          // one per collective instance timed on all its members
  // The specs of the devices the samples name.
  std::map<std::string, pb::DeviceSpec> devices;
  // Per file, what was left out and why ("3 nodes without duration_s").
  std::vector<std::string> notes;
};

// Adds `trace`'s samples. `file` names it in samples and errors. Throws InputError naming the
// file and field when the trace cannot be used: no node has a duration (a lowered graph, not a
// measurement), an unknown device or dtype, a collective whose process group is missing.
void add_trace_samples(const pb::ExecGraph& trace, const std::string& file,
                       const SampleOptions& options, TraceSamples& out);

}  // namespace orrery::calibration
