// The blocking overhead of a calibration profile (CalibrationProfile.blocking_overhead): every
// collective a rank issues in line with its compute (the compute stream's TP collectives) costs
// that much more, in both engines, and collectives on communication streams cost nothing more.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/sim/lower.hpp"

namespace orrery::sim {
namespace {

struct Steps {
  double analytic = 0, des = 0;
};

Steps steps(const ResolvedPlan& plan, double overhead_s) {
  pb::CalibrationProfile profile;
  if (overhead_s > 0) {
    pb::BlockingOverhead* o = profile.add_blocking_overhead();
    o->set_scope("intra_node");
    o->set_overhead_s(overhead_s);
  }
  const auto [a, d] = test::simulate_both(plan, profile);
  return {a.step_time_s(), d.step_time_s()};
}

// Collectives rank 0 issues on its compute stream in one step.
int64_t blocking_collectives(const ResolvedPlan& plan) {
  LowerOptions options;
  options.ranks = {0};
  const pb::ExecGraph g = lower(plan, options);
  int64_t n = 0;
  for (const auto& node : g.ranks(0).nodes())
    n += node.kind() == pb::NODE_KIND_COLLECTIVE && node.stream() == kCompute ? 1 : 0;
  return n;
}

TEST(BlockingOverhead, EveryInLineCollectiveCostsItInBothEngines) {
  const ResolvedPlan plan = test::dgx_h100_plan(8, 1);
  const int64_t n = blocking_collectives(plan);
  ASSERT_GT(n, 100);  // 32 layers x 2 micro-batches x (2 forward + 2 backward) and the head's
  const Steps none = steps(plan, 0), slow = steps(plan, 1e-3);
  // One pipeline stage, no overlap: each of them sits on the step's critical path.
  EXPECT_NEAR(slow.analytic - none.analytic, static_cast<double>(n) * 1e-3, 1e-9) << n << " collectives";
  EXPECT_NEAR(slow.des - none.des, static_cast<double>(n) * 1e-3, 1e-6) << n << " collectives";
}

TEST(BlockingOverhead, CollectivesOnCommunicationStreamsPayNothing) {
  // dp 8, tp 1: the only collectives are the DP reduction's, on the DP stream.
  const ResolvedPlan plan = test::dgx_h100_plan(1, 8);
  EXPECT_EQ(blocking_collectives(plan), 0);
  const Steps none = steps(plan, 0), slow = steps(plan, 1e-3);
  EXPECT_DOUBLE_EQ(slow.analytic, none.analytic);
  EXPECT_DOUBLE_EQ(slow.des, none.des);
}

}  // namespace
}  // namespace orrery::sim
