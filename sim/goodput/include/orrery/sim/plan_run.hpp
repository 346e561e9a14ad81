// A plan's long run built from its failure-free step: what `orrery goodput` reports on one plan
// and what `orrery plan --objective goodput` ranks candidates by.
#pragma once

#include <functional>
#include <string>

#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/footprint.hpp"
#include "orrery/sim/goodput.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

struct PlanRun {
  Footprint footprint;
  double straggler_factor = 1;  // expected step slowdown from stragglers (>= 1)
  // How straggler_factor was priced: "none", the closed form (the whole step slows by
  // straggler_slowdown) or a simulated step (StepRatio).
  std::string straggler_source = "none";
  RunModel run;  // step_s includes the straggler factor
};

// What one slow GPU at `slowdown` does to the step, simulated: the slowed step over `step_s`,
// and a sentence saying how it was found. Empty function: the closed form.
struct StepRatio {
  double ratio = 1;
  std::string source;
};
using SimulateStraggler = std::function<StepRatio(double slowdown)>;

// `step_s`: the plan's failure-free step (a simulation's); `where` names the cluster in errors
// about its failure fields. With `simulate`, a straggler's effect on the step is simulated
// (called once, only when straggler_fraction > 0 and straggler_slowdown != 1).
// `restart_replicas`: a failure restarts only its replica where the plan's replicas allow it
// (RunModel::restart_replicas; the replicas are computed either way).
PlanRun plan_run(const plan::ResolvedPlan& plan, const topologies::Topology& topology,
                 double step_s, const std::string& where, const MeasuredStorage& measured = {},
                 const SimulateStraggler& simulate = {}, bool restart_replicas = false);

}  // namespace orrery::sim
