// Adam's moments in bf16 (optimizer_state_dtype: bf16; executor/src/adamw_bf16_moments.hpp): one
// step of the optimizer against torch::optim::AdamW and against the rounding worked out by hand,
// and training: a data-parallel ZeRO-1 run matches one process with the same moments, and both
// differ from fp32 moments by what bf16 rounding of the moments allows.
#include <gtest/gtest.h>

#include <cmath>

#include "adamw_bf16_moments.hpp"
#include "executor_test_util.hpp"

namespace orrery::executor {
namespace {

const auto kOptions =
    torch::optim::AdamWOptions(0.1).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01);

// Two steps on the same gradients with each optimizer; returns the parameters after each step.
template <typename Optimizer>
std::vector<torch::Tensor> two_steps(torch::Tensor& moment) {
  torch::Tensor p = torch::tensor({1.0F, -2.0F, 0.5F});
  p.set_requires_grad(true);
  Optimizer opt(std::vector<torch::Tensor>{p}, kOptions);
  std::vector<torch::Tensor> out;
  for (const auto& g : {torch::tensor({0.3F, 0.1F, -0.7F}), torch::tensor({-0.2F, 0.05F, 0.4F})}) {
    p.mutable_grad() = g.clone();
    opt.step();
    out.push_back(p.detach().clone());
  }
  const auto& state = static_cast<const torch::optim::AdamWParamState&>(
      *opt.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
  moment = state.exp_avg();
  return out;
}

TEST(Bf16Moments, OneStepAsAdamWThenTheRoundedMomentsCount) {
  torch::Tensor m_fp32, m_bf16;
  const auto fp32 = two_steps<torch::optim::AdamW>(m_fp32);
  const auto bf16 = two_steps<AdamWBf16Moments>(m_bf16);
  // The first update is computed from fp32 moments in both: the same parameters to the bit.
  EXPECT_TRUE(torch::equal(fp32[0], bf16[0])) << fp32[0] << bf16[0];
  // The stored moments are bf16: m = 0.9 bf16(0.1 g1) + 0.1 g2, rounded again.
  ASSERT_EQ(m_bf16.scalar_type(), torch::kBFloat16);
  const torch::Tensor g1 = torch::tensor({0.3F, 0.1F, -0.7F}),
                      g2 = torch::tensor({-0.2F, 0.05F, 0.4F});
  const torch::Tensor m1 =
      torch::zeros({3}).mul_(0.9).add_(g1, 0.1).to(torch::kBFloat16).to(torch::kFloat32);
  const torch::Tensor m2 = m1.clone().mul_(0.9).add_(g2, 0.1).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(m_bf16, m2)) << m_bf16 << m2;
  EXPECT_FALSE(torch::equal(m_fp32.to(torch::kBFloat16).to(torch::kFloat32), m_fp32));
  // The second update reads the rounded moments: different parameters, by about bf16's
  // relative rounding (2^-9 on m, half that through sqrt(v)) of an update of lr = 0.1.
  const double moved = (fp32[1] - bf16[1]).abs().max().item<double>();
  EXPECT_GT(moved, 0);
  EXPECT_LT(moved, 0.1 * 8e-3);
}

constexpr int64_t kSteps = 3;
const std::vector<std::string> kBf16Moments = {"--optimizer-state-dtype", "bf16"};

TEST(Bf16Moments, Zero1Dp2MatchesOneProcessAndDiffersFromFp32Moments) {
  const test::Outcome one = test::train("osd-", "tiny", {"single", 1, 1, 1, kBf16Moments}, kSteps);
  const test::Outcome fp32 = test::train("osd-", "tiny", {"single-fp32", 1, 1, 1, {}}, kSteps);
  auto zero1 = kBf16Moments;
  zero1.insert(zero1.end(), {"--sharding", "zero1"});
  test::expect_matches(one, test::train("osd-", "tiny", {"dp2-zero1", 1, 2, 1, zero1}, kSteps),
                       1e-5, 1e-4);
  // Step 1 is the same update; from step 2 the moments' rounding shows in the loss, a little.
  EXPECT_EQ(one.steps.front().loss, fp32.steps.front().loss);
  const double last = std::abs(one.steps.back().loss - fp32.steps.back().loss);
  EXPECT_GT(last, 0);
  EXPECT_LT(last, 1e-2);
}

}  // namespace
}  // namespace orrery::executor
