// Activation recomputation (executor/src/recompute.hpp) changes what is kept for backward, never
// what is computed: the recomputation re-runs the same deterministic ops on the same inputs, so
// losses, gradient norms and parameters are bit-identical to the same plan without it, on one
// process and under TP with SP and under pipeline stages (where the recomputation re-runs the
// layer's TP collectives inside the backward pass). Op-level checkpointing (selective_op) runs the
// projections as separate GEMMs, as torchtitan does, so its runs match to rounding, not bit for
// bit.
#include <gtest/gtest.h>

#include "executor_test_util.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 2;

using test::Outcome;
using test::Plan;

Outcome train(const std::string& model, const Plan& plan) {
  return test::train("rcp-", model, plan, kSteps);
}

std::string gpt() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-gpt.yaml"; }

Plan with(Plan plan, const std::string& recompute) {
  plan.name += "-" + recompute;
  plan.extra.insert(plan.extra.end(), {"--recompute", recompute});
  return plan;
}

// Bit-identical: every loss, gradient norm and parameter value the same.
void expect_identical(const Outcome& ref, const Outcome& got) {
  ASSERT_EQ(ref.steps.size(), got.steps.size());
  for (size_t s = 0; s < ref.steps.size(); ++s) {
    EXPECT_EQ(ref.steps[s].loss, got.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(ref.steps[s].grad_norm, got.steps[s].grad_norm) << "step " << s + 1;
  }
  ASSERT_EQ(ref.params.size(), got.params.size());
  for (size_t i = 0; i < ref.params.size(); ++i) {
    EXPECT_EQ(ref.params[i].name, got.params[i].name);
    EXPECT_EQ(ref.params[i].values, got.params[i].values) << ref.params[i].name;
  }
}

TEST(Recompute, FullAndSelectiveMatchOneProcessBitForBit) {
  const Plan single{"single", 1, 1, 1, {}};
  const Outcome ref = train("tiny", single);
  EXPECT_LT(ref.steps.back().loss, ref.steps.front().loss);
  expect_identical(ref, train("tiny", with(single, "full")));
  expect_identical(ref, train("tiny", with(single, "selective")));
}

// torchtitan's layer-level checkpointing: only every second layer is re-run (the "tiny" model
// has two, so layer 1 is and layer 0 is not).
TEST(Recompute, EverySecondLayerMatchesOneProcessBitForBit) {
  const Plan single{"single", 1, 1, 1, {}};
  Plan every2 = with(single, "full");
  every2.name += "-every2";
  every2.extra.insert(every2.extra.end(), {"--recompute-every", "2"});
  expect_identical(train("tiny", single), train("tiny", every2));
}

TEST(Recompute, SelectiveWithMaterializedAttentionBf16) {
  const Plan single{"single-mat", 1, 1, 1, {"--precision", "bf16", "--materialized-attention"}};
  expect_identical(train("tiny", single), train("tiny", with(single, "selective")));
}

TEST(Recompute, FullUnderTensorAndSequenceParallelism) {
  const Plan tp2sp{"tp2sp", 2, 1, 1, {"--sp"}};
  expect_identical(train(gpt(), tp2sp), train(gpt(), with(tp2sp, "full")));
}

// Megatron's checkpointed dense MLP (recompute_modules mlp, alone: the attention core is kept):
// re-run from the norm's output with its SP all-gather and reduce-scatter inside the backward.
TEST(Recompute, CheckpointedMlpUnderTensorAndSequenceParallelism) {
  const Plan tp2sp{"tp2sp", 2, 1, 1, {"--sp"}};
  Plan mlp = with(tp2sp, "selective");
  mlp.name += "-mlp";
  mlp.extra.insert(mlp.extra.end(), {"--recompute-modules", "mlp"});
  expect_identical(train(gpt(), tp2sp), train(gpt(), mlp));
  const Plan single{"single", 1, 1, 1, {}};
  Plan mlp1 = with(single, "selective");
  mlp1.name += "-mlp";
  mlp1.extra.insert(mlp1.extra.end(), {"--recompute-modules", "mlp,core_attn"});
  expect_identical(train("tiny", single), train("tiny", mlp1));
}

TEST(Recompute, FullAcrossPipelineStagesOneFOneB) {
  const Plan pp2{"pp2", 1, 1, 2, {"--schedule", "1f1b", "--overlap-grad-reduce"}};
  expect_identical(train("tiny", pp2), train("tiny", with(pp2, "full")));
}

// Op-level checkpointing (op_checkpoint.hpp): what the re-run takes from memory instead of
// computing re-enters autograd through backward functions of its own, so a wrong gradient there
// (a matmul's input, weight or bias, or the attention kernel's q, k, v) would move the parameters
// by the learning rate's order, far beyond these tolerances. The projections run as separate
// GEMMs (q, k, v; gate, up), which changes the rounding: losses agree to 2e-6 and gradient norms
// to 1e-5 (relative); parameters to 1e-4 (as the other parity tests), as AdamW's normalized update
// turns the rounding of a near-zero gradient element into a step of up to the learning rate's
// order.
void expect_rounding_close(const Outcome& ref, const Outcome& got) {
  test::expect_matches(ref, got, 2e-6, 1e-4, 1e-5);
}

// Megatron's output-discarding layernorm (discard_output.hpp): each block norm's output freed
// after its block's forward and re-made into the same memory before its block's backward. The
// GPT-style model's LayerNorm has a bias; under FSDP the norm's weights are this micro-batch's
// gathered copies; with several micro-batches in flight (1F1B) each keeps its own; beside the
// checkpointed MLP, whose region saved the discarded output as its input. The norm's input
// gradient comes out of the re-run's own backward and is then added to the residual's, an order
// of summation that moves the gradients by an ulp or so: compared as op-level checkpointing is.
TEST(Recompute, DiscardedNormsMatchToRounding) {
  auto layernorm = [](Plan plan, const std::string& modules) {
    plan = with(plan, "selective");
    plan.name += "-ln";
    plan.extra.insert(plan.extra.end(), {"--recompute-modules", modules});
    return plan;
  };
  const Plan single{"single", 1, 1, 1, {}};
  expect_rounding_close(train("tiny", single), train("tiny", layernorm(single, "layernorm")));
  const Plan tp2sp{"tp2sp", 2, 1, 1, {"--sp"}};
  expect_rounding_close(train(gpt(), tp2sp), train(gpt(), layernorm(tp2sp, "layernorm,mlp")));
  const Plan fsdp{"fsdp", 1, 2, 1, {"--sharding", "fsdp"}};
  expect_rounding_close(train("tiny", fsdp), train("tiny", layernorm(fsdp, "layernorm,core_attn")));
  const Plan pp2{"pp2", 1, 1, 2, {"--schedule", "1f1b"}};
  expect_rounding_close(train("tiny", pp2), train("tiny", layernorm(pp2, "layernorm")));
}

// moe_act: the routed experts' activation output discarded after their down projection read it
// and re-made before its backward, with EP (each rank's experts) and one kernel per expert.
TEST(Recompute, DiscardedExpertActivationsMatchToRounding) {
  const std::string moe = std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml";
  for (const Plan& plan :
       {Plan{"ep2dp2", 1, 2, 1, {"--ep", "2"}},
        Plan{"ep2dp2-per-expert", 1, 2, 1, {"--ep", "2", "--moe-expert-gemm", "per_expert"}}}) {
    Plan act = with(plan, "selective");
    act.name += "-moe-act";
    act.extra.insert(act.extra.end(), {"--recompute-modules", "moe_act"});
    expect_rounding_close(train(moe, plan), train(moe, act));
  }
}

// "tiny" (gated MLP, RMSNorm, RoPE: kept q, v, O, gate and down), "tiny-gpt" (biases, GELU,
// learned positions: kept q, v, O and up) and "tiny-moe" (router and experts re-run) on one
// process.
TEST(OpLevelCheckpointing, MatchesNoRecomputation) {
  const Plan single{"single", 1, 1, 1, {}};
  const std::string moe = std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml";
  for (const std::string& model : {std::string("tiny"), gpt(), moe})
    expect_rounding_close(train(model, single), train(model, with(single, "selective_op")));
}

// Several micro-batches' kept outputs in flight at once (1F1B over two stages), and FSDP, whose
// re-run reads the parameters the backward gather re-filled.
TEST(OpLevelCheckpointing, AcrossPipelineStagesAndUnderFsdp) {
  const Plan pp2{"pp2", 1, 1, 2, {"--schedule", "1f1b"}};
  expect_rounding_close(train("tiny", pp2), train("tiny", with(pp2, "selective_op")));
  const Plan fsdp{"fsdp", 1, 2, 1, {"--sharding", "fsdp", "--prefetch", "1"}};
  expect_rounding_close(train("tiny", fsdp), train("tiny", with(fsdp, "selective_op")));
}

// The layer's collectives are kept too: the re-run takes the SP all-gathers' and reduce-scatters'
// (or the TP all-reduces') and the EP all-to-alls' outputs from memory, and their backward
// communicates as without checkpointing.
TEST(OpLevelCheckpointing, UnderTensorSequenceAndExpertParallelism) {
  const Plan tp2sp{"tp2sp", 2, 1, 1, {"--sp"}};
  expect_rounding_close(train(gpt(), tp2sp), train(gpt(), with(tp2sp, "selective_op")));
  const Plan tp2{"tp2", 2, 1, 1, {}};
  expect_rounding_close(train("tiny", tp2), train("tiny", with(tp2, "selective_op")));
  const std::string moe = std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml";
  const Plan ep2{"ep2dp2", 1, 2, 1, {"--ep", "2"}};
  expect_rounding_close(train(moe, ep2), train(moe, with(ep2, "selective_op")));
}

// Context parallelism: the ring runs in the layer's first forward only, its output, log-sum-exp
// and last block kept (ring_attention.hpp); the backward ring runs as without checkpointing.
TEST(OpLevelCheckpointing, UnderContextParallelism) {
  const Plan cp2{"cp2", 1, 1, 1, {}, 2};
  expect_rounding_close(train("tiny", cp2), train("tiny", with(cp2, "selective_op")));
}

// bf16 autocast: the kept GEMM outputs are bf16 and their backward casts the gradients back to
// the fp32 masters' type; a materialized attention is re-run (its batched matmuls are not on the
// save list). bf16's rounding of the separate GEMMs' outputs moves the losses by up to 1e-4.
TEST(OpLevelCheckpointing, Bf16AndMaterializedAttention) {
  for (const bool materialized : {false, true}) {
    Plan single{materialized ? "bf16-mat" : "bf16", 1, 1, 1, {"--precision", "bf16"}};
    if (materialized) single.extra.push_back("--materialized-attention");
    test::expect_matches(train("tiny", single), train("tiny", with(single, "selective_op")), 1e-4,
                         1e-2, 1e-3);
  }
}

}  // namespace
}  // namespace orrery::executor
