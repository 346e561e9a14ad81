// Turns one rank's op timings (op_trace.hpp), keyed by the lowering's node names, into that
// rank's measured graph: the predicted RankGraph with start_s and duration_s set. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery::executor {

struct OpTiming {
  // From the step's start; an op timed in several pieces is placed so that its longest piece
  // sits where it ran (op_trace.cpp).
  double start_s = 0;
  double duration_s = 0;  // summed over the pieces
  int64_t pieces = 0;
  // A collective that ran otherwise than the lowering models it (Gloo's reduce-scatter:
  // "alltoall+sum"); copied to the measured node's `algorithm`. Empty: not recorded.
  std::string algorithm;
  // The element type a compute op ran in ("fp32", "bf16"); copied to the node's `dtype`.
  std::string dtype;
};

using StepTimings = std::map<std::string, OpTiming>;

// The steps a measured trace describes: all but the first (warm-up: allocator growth, lazy
// initialisation) when there are several.
std::vector<size_t> measured_steps(size_t steps);

// Sets every node's start_s and duration_s, and the graph's untimed_s from `untimed_s` (one per
// step, OpTrace::untimed_s), to their means over the measured_steps() whose wall time
// (`step_seconds`, one per step) a clipped mean keeps (statistics.hpp: within_clip). Whole steps
// are left out, never single ops: an op's own hiccups are part of the steps it ran in, and the
// ops' means then add up to the mean step (clipping each op on its own left them 5-7% short on a
// shared VM). Returns what does not match, one line each ("ran but not in the graph: X", "in the
// graph but never ran: Y", at most `limit` of each), or "" when the executor ran exactly the
// graph's nodes in every step.
std::string fill_measured(pb::RankGraph& graph, const std::vector<StepTimings>& steps,
                          const std::vector<double>& untimed_s,
                          const std::vector<double>& step_seconds, size_t limit = 8);

// The measured_steps() a clipped mean of their wall times keeps (all of them when `step_seconds`
// does not have one per step).
std::vector<size_t> kept_steps(const std::vector<double>& step_seconds, size_t steps);

}  // namespace orrery::executor
