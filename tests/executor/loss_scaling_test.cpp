// fp16 with dynamic loss scaling (executor/src/loss_scaler.hpp). On a CPU an fp16 plan computes in
// fp32 (libtorch 1.13's CPU has no fp16 GEMMs), so with a power-of-two scale and no overflow the
// scaled backward and the unscaling are exact: the one-process fp16 run equals the fp32 one, and
// DP, TP and PP fp16 runs match the one-process fp16 run as the fp32 plans match theirs. A scale
// beyond fp32's range overflows every gradient: every rank skips every step (the parameters stay
// the initial ones, which an fp32 run with learning rate 0 saves) and the scale halves each time.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "executor_test_util.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 3;

using test::Outcome;
using test::Plan;

const Outcome& reference(const std::string& precision) {
  return test::one_process("fp16-", "tiny", kSteps, {"--precision", precision},
                           "single-" + precision);
}

Outcome train(const Plan& plan, int64_t steps = kSteps) {
  return test::train("fp16-", "tiny", plan, steps);
}

TEST(LossScaling, OneProcessFp16EqualsFp32OnTheCpu) {
  const Outcome& fp16 = reference("fp16");
  test::expect_matches(reference("fp32"), fp16, 1e-9, 1e-9, 1e-9);
  for (const auto& s : fp16.steps) {
    EXPECT_EQ(s.loss_scale, 65536.0) << "step " << s.step;  // GradScaler's 2^16, not yet grown
    EXPECT_FALSE(s.skipped) << "step " << s.step;
  }
}

TEST(LossScaling, Dp2MatchesOneProcessFp16) {
  test::expect_matches(reference("fp16"),
                       train({"dp2", 1, 2, 1, {"--precision", "fp16", "--bucket-bytes", "65536"}}),
                       1e-5, 1e-4);
}

TEST(LossScaling, Tp2Pp2MatchesOneProcessFp16) {
  test::expect_matches(reference("fp16"), train({"tp2pp2", 2, 1, 2, {"--precision", "fp16"}}), 1e-5,
                       1e-4);
}

TEST(LossScaling, ScaleGrowsAfterTheGrowthInterval) {
  const Outcome o =
      train({"dp2-grow", 1, 2, 1, {"--precision", "fp16", "--loss-scale-growth-interval", "1"}});
  ASSERT_EQ(o.steps.size(), 3U);
  EXPECT_EQ(o.steps[0].loss_scale, 65536.0);
  EXPECT_EQ(o.steps[1].loss_scale, 131072.0);
  EXPECT_EQ(o.steps[2].loss_scale, 262144.0);
  test::expect_matches(reference("fp16"), o, 1e-5, 1e-4);  // still exact scaling
}

// Every step overflows (1e60 is beyond fp32, and halving twice keeps it there): no rank updates.
void expect_every_step_skipped(const Plan& plan) {
  const Outcome initial = train({"initial", 1, 1, 1, {"--lr", "0"}}, 2);
  const Outcome o = train(plan, 2);
  ASSERT_EQ(o.steps.size(), 2U);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_TRUE(o.steps[s].skipped) << "step " << s + 1;
    EXPECT_TRUE(std::isnan(o.steps[s].grad_norm)) << "step " << s + 1;
    EXPECT_TRUE(std::isfinite(o.steps[s].loss)) << "step " << s + 1;  // reported unscaled
    // The loss is the initial model's on each step's batch, as the lr-0 run's.
    EXPECT_NEAR(o.steps[s].loss, initial.steps[s].loss, 1e-5) << "step " << s + 1;
  }
  EXPECT_EQ(o.steps[0].loss_scale, 1e60);
  EXPECT_EQ(o.steps[1].loss_scale, 5e59);  // backed off by 0.5
  ASSERT_EQ(o.params.size(), initial.params.size());
  for (size_t i = 0; i < o.params.size(); ++i)
    EXPECT_EQ(o.params[i].values, initial.params[i].values) << o.params[i].name;
}

TEST(LossScaling, OverflowSkipsTheStepOnEveryRankAndHalvesTheScale) {
  // ZeRO-1: each dp rank updates its own chunk, so a rank that stepped would show in the gathered
  // parameters; TP and PP shards are gathered from every rank too.
  expect_every_step_skipped(
      {"dp2-overflow",
       1,
       2,
       1,
       {"--precision", "fp16", "--loss-scale", "1e60", "--sharding", "zero1"}});
  expect_every_step_skipped(
      {"tp2pp2-overflow", 2, 1, 2, {"--precision", "fp16", "--loss-scale", "1e60"}});
}

}  // namespace
}  // namespace orrery::executor
