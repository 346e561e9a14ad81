// Model features beyond the presets' (tests/executor/tiny-qk.yaml: tiny with Qwen3-style qk_norm
// and half of each head rotated) train under TP with SP and under pipeline stages to the same
// losses and parameters as one process, with parallel_correctness_test.cpp's tolerances (fp32
// summation order only). Under TP each rank normalizes its own heads with the replicated q/k norm
// weights, whose gradients are summed over TP.
#include <gtest/gtest.h>

#include "executor_test_util.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 2;

std::string qk_model() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-qk.yaml"; }

test::Outcome train(const test::Plan& plan) {
  return test::train("features-", qk_model(), plan, kSteps);
}

TEST(ModelFeatures, QkNormAndPartialRotaryMatchOneProcess) {
  const test::Outcome ref = train({"single", 1, 1, 1, {}});
  EXPECT_LT(ref.steps.back().loss, ref.steps.front().loss);
  bool has_qk_norm = false;
  for (const auto& p : ref.params)
    has_qk_norm = has_qk_norm || p.name == "layers.1.attn.k_norm.weight";
  EXPECT_TRUE(has_qk_norm);
  test::expect_matches(ref, train({"tp2sp", 2, 1, 1, {"--sp"}}), 1e-5, 1e-4);
  test::expect_matches(ref, train({"pp2", 1, 1, 2, {}}), 1e-5, 1e-4);
}

}  // namespace
}  // namespace orrery::executor
