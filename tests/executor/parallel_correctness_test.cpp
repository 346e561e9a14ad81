// Each parallel plan trains to the same losses and parameters as one process with the same model
// and seed: real ranks (processes), real Gloo groups over loopback. The only differences are
// fp32 summation orders (TP splits GEMM reductions; DP sums gradients across ranks), so losses
// agree to ~1e-6 relative and parameters to well under the AdamW step size (lr 1e-3).
#include <gtest/gtest.h>

#include <cmath>

#include "executor_test_util.hpp"
#include "orrery/executor/results.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 3;
constexpr double kLossTolerance = 1e-5;   // absolute, on losses ~5.5
constexpr double kParamTolerance = 1e-4;  // absolute, on parameters ~0.02..1

using test::Outcome;
using test::Plan;

Outcome train(const std::string& model, const Plan& plan) {
  return test::train("", model, plan, kSteps);
}

void expect_matches(const Outcome& ref, const Outcome& got) {
  test::expect_matches(ref, got, kLossTolerance, kParamTolerance);
}

class ParallelMatchesSingleProcess : public ::testing::TestWithParam<std::string> {
 protected:
  std::string model() const {
    return GetParam() == "gpt" ? std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-gpt.yaml" : "tiny";
  }
};

TEST_P(ParallelMatchesSingleProcess, Tp2) {
  const Outcome ref = train(model(), {"single", 1, 1, 1, {}});
  // The loss falls on the learnable synthetic sequences.
  EXPECT_LT(ref.steps.back().loss, ref.steps.front().loss);
  expect_matches(ref, train(model(), {"tp2", 2, 1, 1, {}}));
}

TEST_P(ParallelMatchesSingleProcess, Tp2SequenceParallel) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"tp2sp", 2, 1, 1, {"--sp"}}));
}

TEST_P(ParallelMatchesSingleProcess, Dp2WithSmallBuckets) {
  // 64 KiB buckets: the tiny models' gradients take several buckets.
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"dp2", 1, 2, 1, {"--bucket-bytes", "65536"}}));
}

TEST_P(ParallelMatchesSingleProcess, Tp2Dp2DpInnermost) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"tp2dp2", 2, 2, 1, {"--placement", "dp,tp"}}));
}

// Context parallelism: each rank trains on two of the 2 cp chunks of every sequence, its
// attention a ring (ring_attention.hpp); gradients are reduced over the dp x cp ranks. The
// GPT-style model has learned positions, which CP ranks look up at their chunks' positions.
TEST_P(ParallelMatchesSingleProcess, Cp2Dp2) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"cp2dp2", 1, 2, 1, {}, 2}));
}

TEST_P(ParallelMatchesSingleProcess, Cp4UnderFsdp) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"cp4fsdp", 1, 1, 1, {"--sharding", "fsdp"}, 4}));
}

TEST_P(ParallelMatchesSingleProcess, Cp2Tp2SequenceParallelPp2) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"cp2tp2pp2sp", 2, 1, 2, {"--sp"}, 2}));
}

// HSDP with CP: shards over 2 dp ranks x their 2 CP ranks, replicated over the other 2 dp ranks
// (torchtitan's dp_replicate x dp_shard x cp mesh).
TEST(ContextParallelMatchesSingleProcess, Cp2Dp4Hsdp) {
  expect_matches(
      train("tiny", {"single", 1, 1, 1, {}}),
      train("tiny", {"cp2dp4hsdp", 1, 4, 1, {"--sharding", "hsdp", "--shard-group", "2"}, 2}));
}

// Pipeline stages, 4 micro-batches per step, so both schedules really interleave. With the
// GPT-style model the first and last stage share the tied embedding matrix.
TEST_P(ParallelMatchesSingleProcess, Pp2) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}), train(model(), {"pp2", 1, 1, 2, {}}));
}

TEST_P(ParallelMatchesSingleProcess, Tp2Pp2SequenceParallel) {
  expect_matches(train(model(), {"single", 1, 1, 1, {}}),
                 train(model(), {"tp2pp2sp", 2, 1, 2, {"--sp"}}));
}

TEST(PipelineMatchesSingleProcess, Pp2Gpipe) {
  expect_matches(train("tiny", {"single", 1, 1, 1, {}}),
                 train("tiny", {"pp2-gpipe", 1, 1, 2, {"--schedule", "gpipe"}}));
}

TEST(PipelineMatchesSingleProcess, Pp2OneFOneB) {
  expect_matches(train("tiny", {"single", 1, 1, 1, {}}),
                 train("tiny", {"pp2-1f1b", 1, 1, 2, {"--schedule", "1f1b"}}));
}

TEST(PipelineMatchesSingleProcess, Tp2Pp2) {
  expect_matches(train("tiny", {"single", 1, 1, 1, {}}), train("tiny", {"tp2pp2", 2, 1, 2, {}}));
}

TEST(PipelineMatchesSingleProcess, Dp2Pp2PpInnermost) {
  expect_matches(train("tiny", {"single", 1, 1, 1, {}}),
                 train("tiny", {"dp2pp2", 1, 2, 2, {"--placement", "pp,dp,tp"}}));
}

// Interleaved 1F1B: two ranks of two model chunks each (layers 0 and 2 on rank 0, 1 and 3 on rank
// 1), 4 micro-batches, so activations wrap from the last rank's chunk 0 to the first rank's chunk
// 1 and the warm-up covers several chunks. The GPT-style model ties the embedding (rank 0, chunk
// 0) to the LM head (rank 1, chunk 1).
std::string test_model(const char* file) { return std::string(ORRERY_EXECUTOR_TEST_DIR) + file; }

TEST(PipelineMatchesSingleProcess, Pp2Vp2Interleaved) {
  const std::string m = test_model("/tiny-4layer.yaml");
  expect_matches(train(m, {"single", 1, 1, 1, {}}),
                 train(m, {"pp2vp2", 1, 1, 2, {"--vp", "2", "--schedule", "interleaved_1f1b"}}));
}

TEST(PipelineMatchesSingleProcess, Pp2Vp2InterleavedTiedZero1Overlapped) {
  const std::string m = test_model("/tiny-gpt-4layer.yaml");
  expect_matches(train(m, {"single", 1, 1, 1, {}}),
                 train(m, {"pp2vp2-zero1",
                           1,
                           1,
                           2,
                           {"--vp", "2", "--schedule", "interleaved_1f1b", "--sharding", "zero1",
                            "--overlap-grad-reduce", "--bucket-bytes", "65536"}}));
}

INSTANTIATE_TEST_SUITE_P(Models, ParallelMatchesSingleProcess, ::testing::Values("llama", "gpt"));

}  // namespace
}  // namespace orrery::executor
