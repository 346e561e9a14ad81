// overlap_grad_reduce: gradient buckets launched during the last micro-batch's backward as their
// gradients become final (DDP's rule, executor/src/grad_ready.hpp) train to the same losses and
// parameters as one process, with the same tolerances as the other parallel tests. The cases
// are the ones where overlapping changes the order of operations: several buckets; pipeline
// stages (only the last backward counts) with a tied embedding (whose bucket waits for the other
// stage's gradient); SP norms (summed over TP after their DP reduction); ZeRO's reduce-scatters;
// MoE with the EP group equal to the DP group (all-to-alls in backward on the group the buckets
// use, so both must be issued in the same order on every rank).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "executor_test_util.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 3;
constexpr double kLossTolerance = 1e-5;
constexpr double kParamTolerance = 1e-4;

using test::Outcome;
using test::Plan;

std::string gpt() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-gpt.yaml"; }
std::string moe() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml"; }

Outcome train(const std::string& model, const Plan& plan) {
  return test::train("overlap-", model, plan, kSteps);
}

const Outcome& reference(const std::string& model) {
  return test::one_process("overlap-", model, kSteps);
}

void expect_matches(const std::string& model, const Plan& plan) {
  test::expect_matches(reference(model), train(model, plan), kLossTolerance, kParamTolerance);
}

TEST(OverlapGradReduce, Dp2SmallBuckets) {
  expect_matches("tiny", {"dp2", 1, 2, 1, {"--overlap-grad-reduce", "--bucket-bytes", "65536"}});
}

TEST(OverlapGradReduce, Dp2Pp2TiedEmbeddingsGpt) {
  expect_matches(gpt(), {"dp2pp2", 1, 2, 2, {"--overlap-grad-reduce", "--bucket-bytes", "65536"}});
}

TEST(OverlapGradReduce, Tp2Dp2SequenceParallelGpt) {
  expect_matches(
      gpt(), {"tp2dp2sp", 2, 2, 1, {"--overlap-grad-reduce", "--sp", "--bucket-bytes", "65536"}});
}

TEST(OverlapGradReduce, Zero1Dp2SmallBuckets) {
  expect_matches("tiny",
                 {"zero1",
                  1,
                  2,
                  1,
                  {"--overlap-grad-reduce", "--sharding", "zero1", "--bucket-bytes", "65536"}});
}

TEST(OverlapGradReduce, Zero2Tp2Dp2SequenceParallelGpt) {
  expect_matches(
      gpt(), {"zero2-tp2dp2sp",
              2,
              2,
              1,
              {"--overlap-grad-reduce", "--sharding", "zero2", "--sp", "--bucket-bytes", "65536"}});
}

// overlap_param_gather: each step's gathers launched at its start, each part waiting for its own
// before its first forward; with both overlaps, as Megatron's distributed optimizer runs.
TEST(OverlapParamGather, Zero1Dp2BothOverlaps) {
  expect_matches("tiny", {"zero1-gather",
                          1,
                          2,
                          1,
                          {"--overlap-grad-reduce", "--overlap-param-gather", "--sharding", "zero1",
                           "--bucket-bytes", "65536"}});
}

TEST(OverlapParamGather, Zero2Dp2Pp2TiedEmbeddingsGpt) {
  expect_matches(gpt(),
                 {"zero2-gather-pp2", 1, 2, 2, {"--overlap-param-gather", "--sharding", "zero2"}});
}

TEST(OverlapGradReduce, MoeEp2Dp2) {
  expect_matches(
      moe(),
      {"moe-ep2dp2", 1, 2, 1, {"--overlap-grad-reduce", "--ep", "2", "--bucket-bytes", "65536"}});
}

}  // namespace
}  // namespace orrery::executor
