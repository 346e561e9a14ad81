#include "orrery/models/layer_ops.hpp"
#include "orrery/sim/sim_output.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::sim {

void fill_throughput(const plan::ResolvedPlan& plan, double recompute_flops_per_step,
                     pb::SimResult& r) {
  const double tokens = static_cast<double>(plan.plan.job().global_batch_size() * plan.seq_len);
  const auto stats = models::model_stats(plan.model, plan.seq_len);
  const double model_flops = stats.training_flops_per_token * tokens;
  // Every device of the cluster runs one rank (resolve_plan checks it): sum peaks by node group.
  double peak = 0;
  for (const auto& g : plan.cluster.node_groups()) {
    for (const auto& nt : plan.cluster.node_types()) {
      if (nt.name() != g.node_type()) continue;
      const auto& d = topologies::find_device(plan.cluster, nt.device());
      const double p = topologies::peak_flops(d, plan.precision.dtype);
      peak += static_cast<double>(g.count() * nt.devices_per_node()) *
              (p > 0 ? p : d.peak_flops().fp32());
    }
  }
  r.set_tokens_per_s(r.step_time_s() > 0 ? tokens / r.step_time_s() : 0);
  r.set_mfu(r.step_time_s() > 0 ? model_flops / (r.step_time_s() * peak) : 0);
  r.set_hfu(r.step_time_s() > 0
                ? (model_flops + recompute_flops_per_step) / (r.step_time_s() * peak)
                : 0);
}

}  // namespace orrery::sim
