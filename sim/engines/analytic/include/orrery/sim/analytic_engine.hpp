// The analytic engine: a plan's step in closed form over the per-layer programs and the pipeline
// schedule (analytic_engine.cpp says how), microseconds to milliseconds per plan, for search; no
// contention between concurrent transfers.
#pragma once

#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/sim_output.hpp"

namespace orrery::sim {

// Analytic: closed form. Throws InputError only through plan resolution (done by the caller).
SimOutput simulate_analytic(const plan::ResolvedPlan& plan, const CostModels& costs);

}  // namespace orrery::sim
