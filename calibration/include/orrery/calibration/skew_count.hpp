// The rank skew's count on a measured rank (docs/calibration.md, "Rank skew"): for each of its
// collectives, the compute the rank ran since it last waited on the collective's group, read off
// the trace's timing as the engines count it. calibrate counts measured compute (the skew
// samples), validate predicted compute (the expected wait in each collective's prediction).
#pragma once

#include <functional>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery::calibration::detail {

// Per node of `rank` (by index): for a timed collective, the sum of `compute_s(node)` over the
// compute nodes that ran since the rank last waited on its group, in the order the nodes
// started; -1 for every other node. A rank waits on a group at a collective of it on its compute
// stream, and when a node of its compute stream depends on a collective of it on another stream
// that ended after the compute stream's previous node did (the stream had to wait for it).
std::vector<double> compute_since_group_wait(
    const pb::RankGraph& rank, const std::function<double(const pb::ExecNode&)>& compute_s);

}  // namespace orrery::calibration::detail
