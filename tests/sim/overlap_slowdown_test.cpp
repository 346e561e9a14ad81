// The overlap slowdowns of a calibration profile (CalibrationProfile.overlap_compute_slowdown,
// .overlap_comm_slowdown): compute beside hidden communication, and that communication, run that
// much slower, in both engines, and nothing changes where no communication is hidden.
#include <gtest/gtest.h>

#include <algorithm>
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
Steps steps(double slowdown, bool overlap, double comm_slowdown = 0,
            void (*shape)(pb::Plan&) = nullptr) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(16);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_overlap_grad_reduce(overlap);
  if (shape != nullptr) shape(p);
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 1);
  const plan::ResolvedPlan plan = plan::resolve_plan(p, models::load_model("llama3-8b"), cluster);
  const topologies::Topology topology(plan.cluster);
  pb::CalibrationProfile profile;
  profile.set_overlap_compute_slowdown(slowdown);
  profile.set_overlap_comm_slowdown(comm_slowdown);
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

// A slowdown of 2 made the step longer in both engines, by at most the communication it slowed
// or ran beside (all of it at half speed), and the two engines agree on what it cost within
// `agree` of it and on the step within 2%.
void expect_both_engines_slower(const Steps& none, const Steps& slow, double agree) {
  const double analytic_extra = slow.analytic - none.analytic;
  const double des_extra = slow.des - none.des;
  EXPECT_GT(analytic_extra, 0);
  EXPECT_GT(des_extra, 0);
  EXPECT_LE(analytic_extra, none.dp_comm * 1.0001);
  EXPECT_LE(des_extra, none.dp_comm * 1.0001);
  EXPECT_NEAR(analytic_extra, des_extra, agree * des_extra)
      << analytic_extra << " vs " << des_extra;
  EXPECT_NEAR(slow.analytic, slow.des, 0.02 * slow.des);
}

TEST(OverlapSlowdown, SlowsComputeBesideHiddenCommunicationInBothEngines) {
  // Some reduction hides under the last backward: that compute takes longer.
  expect_both_engines_slower(steps(1.0, true), steps(2.0, true), 0.35);
}

TEST(OverlapSlowdown, NothingHiddenNothingSlowed) {
  // Without overlap the reduction runs after the backward: no compute runs beside it.
  const Steps none = steps(1.0, false), slow = steps(2.0, false);
  EXPECT_DOUBLE_EQ(slow.analytic, none.analytic);
  EXPECT_NEAR(slow.des, none.des, 1e-9 * none.des);
}

TEST(OverlapSlowdown, CommunicationBesideComputeSlowsInBothEngines) {
  // The reduction under the last backward takes up to twice as long: more of it is exposed.
  const Steps none = steps(1.0, true), slow = steps(1.0, true, 2.0);
  expect_both_engines_slower(none, slow, 0.1);
  // Both slowdowns at once cost more than either alone, and the engines still agree.
  const Steps both = steps(2.0, true, 2.0), compute_only = steps(2.0, true);
  EXPECT_GT(both.analytic, std::max(slow.analytic, compute_only.analytic));
  EXPECT_GT(both.des, std::max(slow.des, compute_only.des));
  EXPECT_NEAR(both.analytic, both.des, 0.02 * both.des);
}

TEST(OverlapSlowdown, EnginesAgreeOnSlowedFsdpAndZeroGathers) {
  // FSDP prefetching a bucket ahead (gathers and reduce-scatters beside each layer's compute) and
  // ZeRO-1 gathering the next step's weights beside the forward: a transfer slowed beside compute
  // speeds up again when the compute ends, in des as in analytic's windows.
  auto fsdp = [](pb::Plan& p) {
    p.set_sharding(pb::SHARDING_FSDP);
    p.set_prefetch_buckets(1);
  };
  auto zero1 = [](pb::Plan& p) {
    p.set_sharding(pb::SHARDING_ZERO1);
    p.set_overlap_param_gather(true);
  };
  for (auto shape : {+fsdp, +zero1}) {
    const Steps none = steps(1.0, false, 1.0, shape), slow = steps(1.0, false, 2.0, shape);
    EXPECT_GT(slow.analytic, none.analytic);
    EXPECT_GT(slow.des, none.des);
    EXPECT_NEAR(slow.analytic, slow.des, 0.02 * slow.des);
    const Steps both = steps(1.5, false, 2.0, shape);
    EXPECT_NEAR(both.analytic, both.des, 0.02 * both.des);
  }
}

TEST(OverlapSlowdown, CommunicationAloneIsNotSlowed) {
  // Without overlap the reduction runs after the backward, beside no compute.
  const Steps none = steps(1.0, false), slow = steps(1.0, false, 2.0);
  EXPECT_DOUBLE_EQ(slow.analytic, none.analytic);
  EXPECT_NEAR(slow.des, none.des, 1e-9 * none.des);
}

}  // namespace
}  // namespace orrery::sim
