// The overlap slowdown of a calibration profile (CalibrationProfile.overlap_compute_slowdown):
// compute beside hidden communication runs that much slower, in both engines, and nothing
// changes where no communication is hidden.
#include <gtest/gtest.h>

#include <memory>

#include "orrery/models/model_catalog.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

struct Steps {
  double analytic = 0, des = 0, dp_comm = 0;
};

// llama3-8b on one DGX H100 node, dp 8, 2 micro-batches, the DP reduction overlapped (or not)
// with the backward, under a profile whose only parameter is the slowdown.
Steps steps(double slowdown, bool overlap) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(16);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_overlap_grad_reduce(overlap);
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 1);
  const ResolvedPlan plan = resolve_plan(p, models::load_model("llama3-8b"), cluster);
  const topologies::Topology topology(plan.cluster);
  pb::CalibrationProfile profile;
  profile.set_overlap_compute_slowdown(slowdown);
  const CostModels costs(topology, plan.precision.dtype, &profile);
  Steps s;
  const SimOutput analytic = simulate_analytic(plan, costs);
  s.analytic = analytic.result.step_time_s();
  const SimOutput des = simulate_des(plan, costs);
  s.des = des.result.step_time_s();
  for (const auto& n : des.timeline.ranks(0).nodes()) {
    if (n.kind() == pb::NODE_KIND_COLLECTIVE) s.dp_comm += n.duration_s();
  }
  return s;
}

TEST(OverlapSlowdown, SlowsComputeBesideHiddenCommunicationInBothEngines) {
  const Steps none = steps(1.0, true), slow = steps(2.0, true);
  const double analytic_extra = slow.analytic - none.analytic;
  const double des_extra = slow.des - none.des;
  // Some reduction hides under the last backward: that compute takes longer...
  EXPECT_GT(analytic_extra, 0);
  EXPECT_GT(des_extra, 0);
  // ...by at most the slowdown's share of the communication it ran beside (slowdown 2: all of it).
  EXPECT_LE(analytic_extra, none.dp_comm * 1.0001);
  EXPECT_LE(des_extra, none.dp_comm * 1.0001);
  // The two engines agree on the cost of the slowdown within 35% of it, and on the step within 2%.
  EXPECT_NEAR(analytic_extra, des_extra, 0.35 * des_extra) << analytic_extra << " vs " << des_extra;
  EXPECT_NEAR(slow.analytic, slow.des, 0.02 * slow.des);
}

TEST(OverlapSlowdown, NothingHiddenNothingSlowed) {
  // Without overlap the reduction runs after the backward: no compute runs beside it.
  const Steps none = steps(1.0, false), slow = steps(2.0, false);
  EXPECT_DOUBLE_EQ(slow.analytic, none.analytic);
  EXPECT_NEAR(slow.des, none.des, 1e-9 * none.des);
}

}  // namespace
}  // namespace orrery::sim
