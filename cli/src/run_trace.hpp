// The CLI's half of a measured run (`orrery run --out DIR`): the executor never links the
// simulator, so the CLI lowers the plan for it (each rank gets its own RankGraph to time under
// the same node names) and, once every local rank has finished, merges the ranks' measured
// graphs into DIR/trace.json (an ExecGraph carrying the plan, model and cluster, so `orrery
// validate --trace` can simulate the same run again) and DIR/timeline.json (Perfetto).
#pragma once

#include <cstdint>
#include <string>

#include "orrery/pb/exec_graph.pb.h"
#include "plan_args.hpp"

namespace orrery::cli {

// The simulator's graph of `rank` for `job`'s plan.
pb::RankGraph predicted_rank_graph(const LoadedJob& job, int64_t rank);

// Reads DIR/trace.rank<N>.json of every rank and DIR/step_*.json of steps first_step..steps (the
// ranks' last attempt: after a resume, the steps after its checkpoint), writes DIR/trace.json and
// DIR/timeline.json, removes the per-rank files. Returns the merged trace.
pb::ExecGraph merge_run_trace(const LoadedJob& job, const std::string& dir, int64_t first_step,
                              int64_t steps);

// "mean step S s (steps 2..N), T tokens/s, MFU M of the cluster's P peak" (steps F+1..N when the
// trace's first step was F, after a resume): the measured step of a merged trace against the
// model's training FLOPs (models::model_stats, as the simulator's MFU) and the peak of the
// cluster's devices at the plan's precision.
std::string throughput_line(const LoadedJob& job, const pb::ExecGraph& trace, int64_t first_step);

}  // namespace orrery::cli
