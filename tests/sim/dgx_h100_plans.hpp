// The job the calibrated-overhead tests share: llama3-8b on one DGX H100, two micro-batches of
// 2,048 tokens per replica, bf16, no pipeline and nothing overlapped, so that every op on a
// rank's compute stream sits on the step's critical path; and both engines' results under a
// profile.
#pragma once

#include <cstdint>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim::test {

inline plan::ResolvedPlan dgx_h100_plan(int64_t tp, int64_t dp, bool sequence_parallel = false) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(2 * dp);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(tp);
  p.mutable_parallel()->set_dp(dp);
  p.mutable_parallel()->set_sequence_parallel(sequence_parallel);
  p.set_micro_batch_size(1);
  return plan::resolve_plan(p, models::load_model("llama3-8b"),
                            topologies::load_cluster("dgx-h100", 1));
}

struct BothEngines {
  pb::SimResult analytic, des;
};

inline BothEngines simulate_both(const plan::ResolvedPlan& plan,
                                 const pb::CalibrationProfile& profile) {
  const topologies::Topology topology(plan.cluster);
  const CostModels costs(topology, plan.precision.dtype, &profile);
  return {simulate_analytic(plan, costs).result, simulate_des(plan, costs).result};
}

}  // namespace orrery::sim::test
