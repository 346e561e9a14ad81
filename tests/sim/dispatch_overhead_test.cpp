// The dispatch overhead of a calibration profile (CalibrationProfile.dispatch_overhead): both
// engines add it once before every op a rank issues on its compute stream (compute ops and the
// in-line TP collectives), report it as its own breakdown term, and leave the ops' own times,
// and every other device, alone.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/plan/lower.hpp"

namespace orrery::sim {
namespace {

struct Sims {
  double analytic = 0, des = 0;
  double analytic_dispatch = 0, des_dispatch = 0;
};

Sims run(const plan::ResolvedPlan& plan, const std::string& device, double per_op_s) {
  pb::CalibrationProfile profile;
  if (per_op_s > 0) {
    pb::DispatchOverhead* d = profile.add_dispatch_overhead();
    d->set_device(device);
    d->set_per_op_s(per_op_s);
  }
  const auto [a, d] = test::simulate_both(plan, profile);
  return {a.step_time_s(), d.step_time_s(), a.breakdown().dispatch_s(), d.breakdown().dispatch_s()};
}

// Ops rank 0 issues on its compute stream in one step.
int64_t compute_stream_ops(const plan::ResolvedPlan& plan) {
  plan::LowerOptions options;
  options.ranks = {0};
  const pb::ExecGraph g = plan::lower(plan, options);
  int64_t n = 0;
  for (const auto& node : g.ranks(0).nodes()) n += node.stream() == plan::kCompute ? 1 : 0;
  return n;
}

void expect_every_op_pays(const plan::ResolvedPlan& plan) {
  const std::string device = plan::device_of(plan, 0).name();
  const int64_t n = compute_stream_ops(plan);
  const Sims none = run(plan, device, 0), slow = run(plan, device, 1e-3);
  // One stage, nothing overlapped: every compute-stream op is on the step's critical path.
  const double expected = static_cast<double>(n) * 1e-3;
  EXPECT_NEAR(slow.analytic - none.analytic, expected, 1e-9) << n << " ops";
  EXPECT_NEAR(slow.des - none.des, expected, 1e-6) << n << " ops";
  EXPECT_NEAR(slow.analytic_dispatch, expected, 1e-9);
  EXPECT_NEAR(slow.des_dispatch, expected, 1e-6);
  EXPECT_EQ(none.analytic_dispatch, 0);
  EXPECT_EQ(none.des_dispatch, 0);
}

TEST(DispatchOverhead, EveryComputeOpPaysItInBothEngines) {
  // dp 8 without overlap: the gradient reduction starts after the last backward op.
  expect_every_op_pays(test::dgx_h100_plan(1, 8));
}

TEST(DispatchOverhead, InLineCollectivesPayItToo) {
  expect_every_op_pays(test::dgx_h100_plan(8, 1));
}

TEST(DispatchOverhead, OtherDevicesPayNothing) {
  const plan::ResolvedPlan plan = test::dgx_h100_plan(8, 1);
  const Sims none = run(plan, "", 0), other = run(plan, "some-other-device", 1e-3);
  EXPECT_DOUBLE_EQ(other.analytic, none.analytic);
  EXPECT_DOUBLE_EQ(other.des, none.des);
}

}  // namespace
}  // namespace orrery::sim
