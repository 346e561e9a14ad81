#include "orrery/sim/plan_run.hpp"

#include "orrery/base/units.hpp"
#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/failure_model.hpp"

namespace orrery::sim {

PlanRun plan_run(const plan::ResolvedPlan& plan, const topologies::Topology& topology,
                 double step_s, const std::string& where, const MeasuredStorage& measured,
                 const SimulateStraggler& simulate, bool restart_replicas) {
  PlanRun p;
  p.footprint = footprint(plan, topology);
  p.run.failures = failure_rates(plan.cluster, p.footprint, where);
  const FailureRates& f = p.run.failures;
  double ratio = f.straggler_slowdown;
  if (f.straggler_fraction > 0 && f.straggler_slowdown != 1) {
    p.straggler_source = "closed form: the whole step " + base::units::number(ratio) + "x slower";
    if (simulate) {
      const StepRatio r = simulate(f.straggler_slowdown);
      ratio = r.ratio;
      p.straggler_source = r.source;
    }
  }
  p.straggler_factor = straggler_step_factor(f.straggler_fraction, ratio, p.footprint.gpus);
  p.run.step_s = step_s * p.straggler_factor;
  p.run.checkpoint = checkpoint_model(plan, p.footprint, measured);
  p.run.replicas = replica_restarts(plan, topology, p.run.checkpoint);
  p.run.restart_replicas = restart_replicas;
  p.run.degradations = degradations(plan.cluster, p.footprint);
  return p;
}

}  // namespace orrery::sim
