// What an engine returns, and the throughput figures both engines derive from a step time.
#pragma once

#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/sim_result.pb.h"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::sim {

struct SimOutput {
  pb::SimResult result;
  // des: the simulated ranks' graphs with start_s and duration_s on every node (the timeline).
  pb::ExecGraph timeline;
};

// Fills tokens/s, MFU and HFU from step time and the plan (shared by both engines).
void fill_throughput(const plan::ResolvedPlan& plan, double recompute_flops_per_step,
                     pb::SimResult& r);

}  // namespace orrery::sim
