// One job simulated as `orrery simulate` does it: the plan resolved against its model and
// cluster, the cost models of its precision (and calibration), then the engine. `sweep` runs the
// same path once per point, so a point's figures are exactly what simulate prints for it.
#pragma once

#include "orrery/pb/calibration.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/engine.hpp"
#include "plan_args.hpp"

namespace orrery::cli {

struct SimulatedJob {
  plan::ResolvedPlan plan;
  sim::SimOutput output;
};

// `calibration` may be null (the simulator's defaults).
SimulatedJob simulate_job(const LoadedJob& job, sim::EngineKind engine,
                          const pb::CalibrationProfile* calibration,
                          const sim::DesOptions& options);

}  // namespace orrery::cli
