// What the executor refuses before any rank starts (unsupported_reason): plan features it does
// not implement yet, each with its own message, which `orrery run` reports with exit status 2.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "orrery/executor/train_config.hpp"
#include "orrery/models/model_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

TrainConfig tiny_pp2() {
  TrainConfig c;
  c.model = models::load_model("tiny");
  c.plan.set_model("tiny");
  c.plan.mutable_job()->set_global_batch_size(4);
  c.plan.mutable_job()->set_seq_len(32);
  c.plan.mutable_job()->set_precision(pb::PRECISION_FP32);
  c.plan.mutable_parallel()->set_tp(1);
  c.plan.mutable_parallel()->set_dp(1);
  c.plan.mutable_parallel()->set_pp(2);
  c.plan.set_micro_batch_size(1);
  return c;
}

TEST(UnsupportedReason, PlainPipelineRuns) { EXPECT_EQ(unsupported_reason(tiny_pp2()), ""); }

TEST(UnsupportedReason, VirtualStagesRunButNotOnOneRankOrUnderFsdp) {
  TrainConfig c = tiny_pp2();
  c.model = models::load_model(std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-4layer.yaml");
  c.plan.set_model(c.model.name());
  c.plan.mutable_parallel()->set_vp(2);
  c.plan.mutable_parallel()->set_schedule(pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B);
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.set_sharding(pb::SHARDING_FSDP);
  EXPECT_NE(unsupported_reason(c).find("parallel.vp 2 with sharding zero3/fsdp"), std::string::npos)
      << unsupported_reason(c);
  c.plan.set_sharding(pb::SHARDING_NONE);
  c.plan.mutable_parallel()->set_pp(1);
  c.plan.mutable_parallel()->set_dp(2);
  EXPECT_NE(unsupported_reason(c).find("parallel.vp 2 with pp 1"), std::string::npos)
      << unsupported_reason(c);
}

TEST(UnsupportedReason, PerStageDegreesAreNotImplementedYet) {
  for (const bool tp : {true, false}) {
    TrainConfig c = tiny_pp2();
    for (int s = 0; s < 2; ++s) (tp ? c.plan.add_stage_tp(1) : c.plan.add_stage_dp(1));
    EXPECT_NE(unsupported_reason(c).find(
                  "stage_tp/stage_dp: per-stage tensor- and data-parallel degrees are not "
                  "implemented in the executor yet"),
              std::string::npos)
        << unsupported_reason(c);
  }
}

TEST(UnsupportedReason, ModelFeaturesTheExecutorRunsAreAccepted) {
  const std::pair<void (*)(pb::ModelSpec&), std::string> features[] = {
      {[](pb::ModelSpec& m) { m.set_position_embedding(pb::POSITION_EMBEDDING_ALIBI); }, "ALiBi"},
      {[](pb::ModelSpec& m) { m.set_parallel_block(true); }, "parallel_block"},
      {[](pb::ModelSpec& m) { m.set_sliding_window(16); }, "sliding_window"},
      {[](pb::ModelSpec& m) { m.set_attn_logit_softcapping(50); }, "attn_logit_softcapping"},
      {[](pb::ModelSpec& m) { m.set_final_logit_softcapping(30); }, "final_logit_softcapping"},
      {[](pb::ModelSpec& m) { m.set_post_block_norm(true); }, "post_block_norm"}};
  for (const auto& [set, name] : features) {
    TrainConfig c = tiny_pp2();
    set(c.model);
    EXPECT_EQ(unsupported_reason(c), "") << name;
  }
}

TEST(UnsupportedReason, ParallelBlockAroundMoeLayersIsRefusedByName) {
  TrainConfig c = tiny_pp2();
  c.model.set_parallel_block(true);
  c.model.mutable_moe()->set_num_experts(4);
  c.model.mutable_moe()->set_top_k(2);
  c.model.mutable_moe()->set_expert_ffn_hidden_size(64);
  EXPECT_NE(
      unsupported_reason(c).find(
          "model tiny: parallel_block with MoE layers is not implemented in the executor yet"),
      std::string::npos)
      << unsupported_reason(c);
}

TEST(UnsupportedReason, Bf16WithEveryParallelism) {
  // bf16 runs with tp, ep and every sharding the executor implements (mixed_precision.hpp).
  TrainConfig c = tiny_pp2();
  c.plan.mutable_job()->set_precision(pb::PRECISION_BF16);
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.mutable_parallel()->set_pp(1);
  c.plan.mutable_parallel()->set_dp(2);
  for (auto s : {pb::SHARDING_ZERO1, pb::SHARDING_ZERO2, pb::SHARDING_ZERO3, pb::SHARDING_FSDP}) {
    c.plan.set_sharding(s);
    EXPECT_EQ(unsupported_reason(c), "") << pb::Sharding_Name(s);
  }
  c.plan.mutable_parallel()->set_tp(2);
  c.plan.mutable_parallel()->set_sequence_parallel(true);
  EXPECT_EQ(unsupported_reason(c), "");
  TrainConfig moe = c;
  moe.model = models::load_model(std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml");
  moe.plan.set_model(moe.model.name());
  moe.plan.set_sharding(pb::SHARDING_ZERO1);
  moe.plan.mutable_parallel()->set_ep(2);
  EXPECT_EQ(unsupported_reason(moe), "");
}

TEST(UnsupportedReason, Fp16RunsWithValidLossScalingAndFp8IsRefused) {
  // fp16 runs with dynamic loss scaling (GradScaler's defaults); settings that could never
  // rescale are refused; fp8 is not there.
  TrainConfig c = tiny_pp2();
  c.plan.mutable_job()->set_precision(pb::PRECISION_FP16);
  EXPECT_EQ(unsupported_reason(c), "");
  c.loss_scaling.growth_interval = 0;
  EXPECT_EQ(unsupported_reason(c),
            "job.precision fp16: the loss scaling needs an initial scale > 0, a growth factor > "
            "1, a backoff factor in (0, 1) and a growth interval >= 1");
  c.plan.mutable_job()->set_precision(pb::PRECISION_FP8);
  EXPECT_EQ(unsupported_reason(c),
            "job.precision fp8: not implemented in the executor (fp32, bf16 and fp16 are)");
}

TEST(UnsupportedReason, HsdpAndBf16GradientReductionRun) {
  // dp 4 in shard groups of 2, with bf16 gradient reductions; a shard group of 1 is refused.
  TrainConfig c = tiny_pp2();
  c.plan.mutable_parallel()->set_pp(1);
  c.plan.mutable_parallel()->set_dp(4);
  c.plan.mutable_job()->set_global_batch_size(8);
  c.plan.set_sharding(pb::SHARDING_HSDP);
  c.plan.set_shard_group_size(2);
  c.plan.set_grad_reduce_dtype(pb::GRAD_REDUCE_DTYPE_BF16);
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.set_shard_group_size(1);
  EXPECT_NE(unsupported_reason(c).find("sharding hsdp with shard_group_size 1"), std::string::npos);
  c.plan.set_shard_group_size(3);
  EXPECT_NE(unsupported_reason(c).find("shard_group_size"), std::string::npos);
}

TEST(UnsupportedReason, OverlapFlagsRun) {
  TrainConfig c = tiny_pp2();
  c.plan.set_overlap_grad_reduce(true);
  c.plan.set_overlap_param_gather(true);
  for (auto s : {pb::SHARDING_NONE, pb::SHARDING_ZERO1, pb::SHARDING_ZERO2}) {
    c.plan.set_sharding(s);
    EXPECT_EQ(unsupported_reason(c), "") << pb::Sharding_Name(s);
  }
}

TEST(UnsupportedReason, RecomputationRunsWithEverySharding) {
  TrainConfig c = tiny_pp2();
  for (auto r : {pb::RECOMPUTE_SELECTIVE, pb::RECOMPUTE_FULL}) {
    c.plan.set_recompute(r);
    EXPECT_EQ(unsupported_reason(c), "") << pb::Recompute_Name(r);
  }
  c.plan.mutable_parallel()->set_pp(1);
  c.plan.mutable_parallel()->set_dp(2);
  for (auto s : {pb::SHARDING_ZERO3, pb::SHARDING_FSDP}) {
    c.plan.set_sharding(s);
    EXPECT_EQ(unsupported_reason(c), "") << pb::Sharding_Name(s);
  }
  c.plan.set_recompute(pb::RECOMPUTE_SELECTIVE);
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.set_recompute(pb::RECOMPUTE_SELECTIVE_OP);
  EXPECT_EQ(unsupported_reason(c), "");
}

// Megatron's core_attn, mlp and the output-discarding layernorm and moe_act are the executor's
// selective recomputation; mla_up_proj is refused, and layernorm around a parallel block's shared
// norm, and moe_act inside a checkpointed MoE layer. Layer-level checkpointing (recompute_every)
// runs.
TEST(UnsupportedReason, RecomputeModulesTheExecutorCannotRunAreRefused) {
  TrainConfig c = tiny_pp2();
  c.plan.set_recompute(pb::RECOMPUTE_SELECTIVE);
  c.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_CORE_ATTN);
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.set_optimizer_state_dtype(pb::OPTIMIZER_STATE_DTYPE_BF16);  // runs (adamw_bf16_moments)
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.set_optimizer_state_dtype(pb::OPTIMIZER_STATE_DTYPE_FP32);
  c.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_MLP);
  EXPECT_EQ(unsupported_reason(c), "");
  c.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_LAYERNORM);
  EXPECT_EQ(unsupported_reason(c), "");
  c.model.set_parallel_block(true);
  EXPECT_EQ(unsupported_reason(c),
            "recompute_modules layernorm with model tiny's parallel block: the norm both branches "
            "read is not discarded by the executor yet");
  c.model.set_parallel_block(false);
  c.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_MLA_UP_PROJ);
  EXPECT_EQ(unsupported_reason(c),
            "recompute_modules mla_up_proj: Megatron-core's output-discarding recomputation of it "
            "is simulated, not run by the executor yet (core_attn, mlp, moe, shared_experts, "
            "layernorm and moe_act are)");
  c.plan.clear_recompute_modules();
  c.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_MOE);
  c.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_MOE_ACT);
  EXPECT_EQ(unsupported_reason(c),
            "recompute_modules moe_act with moe: the activation inside a checkpointed MoE layer is "
            "not discarded by the executor yet (either alone is)");
  c.plan.clear_recompute_modules();
  c.plan.set_recompute(pb::RECOMPUTE_FULL);
  c.plan.set_recompute_every(2);
  EXPECT_EQ(unsupported_reason(c), "");
}

TEST(UnsupportedReason, DeepEpDispatchIsRefused) {
  TrainConfig c = tiny_pp2();
  c.plan.set_moe_dispatcher(pb::MOE_DISPATCHER_DEEPEP);
  EXPECT_EQ(unsupported_reason(c),
            "moe_dispatcher deepep: DeepEP's dispatch kernels are simulated, not run by the "
            "executor (alltoall is)");
}

TEST(UnsupportedReason, QkNormAndPartialRotaryRunButAnOddRotaryWidthDoesNot) {
  TrainConfig c = tiny_pp2();
  c.model.set_qk_norm(true);
  c.model.set_rotary_fraction(0.5);  // 8 of tiny's 16 dimensions per head
  EXPECT_EQ(unsupported_reason(c), "");
  c.model.set_rotary_fraction(0.25 + 1.0 / 32);  // 4.5: 4 after truncation, still even
  EXPECT_EQ(unsupported_reason(c), "");
  c.model.set_rotary_fraction(3.0 / 16);  // 3
  EXPECT_NE(unsupported_reason(c).find("rotates 3 dimensions of each head"), std::string::npos)
      << unsupported_reason(c);
}

}  // namespace
}  // namespace orrery::executor
