// What one straggling GPU does to a synchronous step, simulated by the des engine instead of the
// closed form's "the whole step runs slowdown times longer" (docs/goodput.md, "Stragglers"):
// the slow GPU's compute takes longer, its peers wait for it at the next collective or pipeline
// transfer, and communication it does not delay keeps its pace.
#pragma once

#include "orrery/pb/calibration.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/plan_run.hpp"

namespace orrery::sim {

// The GPU the simulated straggler sits on: the first rank of the last pipeline stage, which
// holds the output layer and loss (the stage that already paces a uniform split).
int64_t straggler_device(const plan::ResolvedPlan& plan);

// The des step of `plan` with one more GPU straggler (straggler_device, compute x `slowdown`)
// over `step_s`, the same engine's step without it. Every rank is simulated (a straggler breaks
// the symmetry), so a plan past options.max_nodes falls back to the closed form, and the source
// says so. `calibration` may be null.
StepRatio des_straggler_ratio(const plan::ResolvedPlan& plan,
                              const pb::CalibrationProfile* calibration, double step_s,
                              double slowdown, const DesOptions& options);

}  // namespace orrery::sim
