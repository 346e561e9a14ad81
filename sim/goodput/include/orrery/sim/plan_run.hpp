// A plan's long run built from its failure-free step: what `orrery goodput` reports on one plan
// and what `orrery plan --objective goodput` ranks candidates by.
#pragma once

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
  RunModel run;                 // step_s includes the straggler factor
};

// `step_s`: the plan's failure-free step (a simulation's); `where` names the cluster in errors
// about its failure fields. `restart_replicas`: a failure restarts only its replica where the
// plan's replicas allow it (RunModel::restart_replicas; the replicas are computed either way).
PlanRun plan_run(const plan::ResolvedPlan& plan, const topologies::Topology& topology,
                 double step_s, const std::string& where, const MeasuredStorage& measured = {},
                 bool restart_replicas = false);

}  // namespace orrery::sim
