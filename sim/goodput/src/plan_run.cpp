#include "orrery/sim/plan_run.hpp"

#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/failure_model.hpp"

namespace orrery::sim {

PlanRun plan_run(const plan::ResolvedPlan& plan, const topologies::Topology& topology,
                 double step_s, const std::string& where, const MeasuredStorage& measured,
                 bool restart_replicas) {
  PlanRun p;
  p.footprint = footprint(plan, topology);
  p.run.failures = failure_rates(plan.cluster, p.footprint, where);
  p.straggler_factor = straggler_step_factor(p.run.failures.straggler_fraction,
                                             p.run.failures.straggler_slowdown, p.footprint.gpus);
  p.run.step_s = step_s * p.straggler_factor;
  p.run.checkpoint = checkpoint_model(plan, p.footprint, measured);
  p.run.replicas = replica_restarts(plan, topology, p.run.checkpoint);
  p.run.restart_replicas = restart_replicas;
  return p;
}

}  // namespace orrery::sim
