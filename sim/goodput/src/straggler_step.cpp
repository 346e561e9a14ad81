#include "orrery/sim/straggler_step.hpp"

#include "orrery/base/units.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

int64_t straggler_device(const plan::ResolvedPlan& plan) {
  const int64_t rank = plan::rank_layout(plan).rank({0, 0, 0, plan.degrees.pp - 1});
  return plan.device_of_rank[static_cast<size_t>(rank)];
}

StepRatio des_straggler_ratio(const plan::ResolvedPlan& plan,
                              const pb::CalibrationProfile* calibration, double step_s,
                              double slowdown, const DesOptions& options) {
  const int64_t device = straggler_device(plan);
  pb::ClusterSpec slowed = plan.cluster;
  pb::Straggler& s = *slowed.add_stragglers();
  s.set_gpu(device);
  s.set_compute_factor(slowdown);
  const plan::ResolvedPlan p = plan::resolve_plan(plan.plan, plan.model, slowed);
  const topologies::Topology topology(slowed);
  const CostModels costs(topology, p.precision.dtype, calibration);
  const std::string gpu =
      "GPU " + std::to_string(device) + " at " + base::units::number(slowdown) + "x";
  try {
    const double slow_s = simulate_des(p, costs, options).result.step_time_s();
    return {slow_s / step_s, "des: " + gpu + " makes the step " +
                                 base::units::number(slow_s / step_s) + "x (" +
                                 base::units::seconds(slow_s) + ")"};
  } catch (const DesOverBudget& e) {
    return {slowdown, "closed form: the whole step " + base::units::number(slowdown) +
                          "x slower (the des run with " + gpu +
                          " simulates every rank and is over "
                          "its budget: " +
                          e.reason() + ")"};
  }
}

}  // namespace orrery::sim
