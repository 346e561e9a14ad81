// The simulator's two engines behind one call:
//   analytic  closed form over the per-layer programs and the pipeline schedule: microseconds to
//             milliseconds per plan, for search; no contention between concurrent transfers.
//   des       SimGrid discrete-event simulation of the lowered graph on the topology's links:
//             flows of concurrent collectives contend.
// Both cost ops with the same compute and collective models (CostModels), so on a
// contention-free case they agree (tests/sim/des_engine_test.cpp, pipeline_transfers_test.cpp).
// Every caller that lets the user choose the engine (simulate, plan's ranking, validate) goes
// through simulate() here, so an option the des engine takes is never dropped by one of them.
#pragma once

#include <string>

#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/analytic_engine.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/sim_output.hpp"

namespace orrery::sim {

enum class EngineKind { kAnalytic, kDes };
const char* to_string(EngineKind kind);
// "analytic" or "des"; anything else is an InputError naming `flag`.
EngineKind parse_engine(const std::string& name, const std::string& flag);

// The step of `plan` by `engine`; `des` applies to the des engine only.
SimOutput simulate(const plan::ResolvedPlan& plan, const CostModels& costs, EngineKind engine,
                   const DesOptions& des = {});

}  // namespace orrery::sim
