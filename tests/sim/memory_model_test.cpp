// The memory model by hand, on llama3-8b (8,030,261,248 parameters) on DGX H100s (80 GB each).
//
// Parameters, by hand (h 4096, 32 heads + 8 KV heads of 128, FFN 14336, vocab 128256):
//   a layer: qkv 4096 x 6144 + out 4096 x 4096 + up/gate 4096 x 28672 + down 14336 x 4096
//            + 2 RMSNorm weights 4096 = 218,112,000
//   embedding = LM head = 128256 x 4096 = 525,336,576; final norm 4096
//   P = 32 x 218,112,000 + 2 x 525,336,576 + 4096 = 8,030,261,248
//
// Saved activations per micro-batch (b 1, s 2048, tp 1, flash attention; Korthikanti et al. in
// bytes, sh = 2048 x 4096 = 8,388,608):
//   attn.norm input 2sh, qkv input 2sh, Q 2sh + K,V 1sh (8 KV heads x 256 x 2 B = h bytes per
//   token) + log-sum-exp 32 x 4 B per token (128 s = 262,144), attn.out input 2sh,
//   mlp.norm input 2sh, up input 2sh, act input 2 x 14336 x 2 B = 14sh, down input 7sh
//   -> a layer: 34sh + 128s = 285,212,672 + 262,144 = 285,474,816
//   head: norm input 2sh + lm input 2sh + fp32 softmax of 2048 x 128256 logits (1,050,673,152)
//   -> 1,084,227,584; the embedding keeps nothing.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/op_sac.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

constexpr double P = 8030261248.0;
constexpr double kHeadParams = 128256.0 * 4096 + 4096;  // LM head + final RMSNorm
constexpr double kLayerParams = 218112000.0;
constexpr double kLayerActivations = 285474816.0;
constexpr double kHeadActivations = 1084227584.0;
constexpr double kCapacity = 81559.0 * 1024 * 1024;  // H100-SXM: 81,559 MiB as nvidia-smi reports

plan::ResolvedPlan plan(const std::string& model, int64_t tp, int64_t pp, int64_t dp,
                        int64_t global_batch, pb::Sharding sharding,
                        pb::Recompute recompute = pb::RECOMPUTE_NONE, int64_t vp = 1,
                        pb::PipelineSchedule schedule = pb::PIPELINE_SCHEDULE_UNSPECIFIED) {
  pb::Plan p;
  p.set_model(model);
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(global_batch);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.set_micro_batch_size(1);
  auto* x = p.mutable_parallel();
  x->set_tp(tp), x->set_pp(pp), x->set_dp(dp), x->set_vp(vp);
  x->set_schedule(schedule);
  p.set_sharding(sharding);
  p.set_recompute(recompute);
  const int64_t nodes = tp * pp * dp / 8;
  return plan::resolve_plan(p, models::load_model(model),
                            topologies::load_cluster("dgx-h100", nodes));
}

void expect_consistent(const pb::RankMemory& m) {
  const double sum = m.parameters_bytes() + m.gradients_bytes() + m.optimizer_bytes() +
                     m.activations_bytes() + m.comm_buffers_bytes() + m.allocator_overhead_bytes();
  EXPECT_NEAR(m.peak_bytes(), sum, sum * 1e-15);
  EXPECT_EQ(m.capacity_bytes(), kCapacity);
  EXPECT_EQ(m.oom(), m.peak_bytes() > kCapacity);
  // The runtime's fixed 1.15 GiB plus 8 % of the activations for fragmentation.
  EXPECT_DOUBLE_EQ(m.allocator_overhead_bytes(),
                   kGpuRuntimeBytes + kAllocatorFragmentation * m.activations_bytes());
}

TEST(MemoryModel, StatesPerShardingOnOneNode) {
  // dp 8, one micro-batch (8 sequences / 8 replicas).
  const auto none = memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_NONE));
  const auto z1 = memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1));
  const auto z2 = memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO2));
  const auto fsdp = memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_FSDP));
  for (const auto* m : {&none, &z1, &z2, &fsdp}) {
    ASSERT_EQ(m->size(), 1u);
    expect_consistent((*m)[0]);
    EXPECT_EQ((*m)[0].rank(), 0);
  }
  // DDP: bf16 weights 2P = 16,060,522,496; fp32 grads 4P = 32,121,044,992; fp32 master + Adam
  // m, v 12P = 96,363,134,976.
  EXPECT_DOUBLE_EQ(none[0].parameters_bytes(), 2 * P);
  EXPECT_DOUBLE_EQ(none[0].gradients_bytes(), 4 * P);
  EXPECT_DOUBLE_EQ(none[0].optimizer_bytes(), 12 * P);
  // ZeRO-1: optimizer state / 8 = 12,045,391,872.
  EXPECT_DOUBLE_EQ(z1[0].parameters_bytes(), 2 * P);
  EXPECT_DOUBLE_EQ(z1[0].gradients_bytes(), 4 * P);
  EXPECT_DOUBLE_EQ(z1[0].optimizer_bytes(), 12 * P / 8);
  // ZeRO-2: + gradients / 8 = 4,015,130,624.
  EXPECT_DOUBLE_EQ(z2[0].parameters_bytes(), 2 * P);
  EXPECT_DOUBLE_EQ(z2[0].gradients_bytes(), 4 * P / 8);
  EXPECT_DOUBLE_EQ(z2[0].optimizer_bytes(), 12 * P / 8);
  // FSDP, no prefetch: weights / 8 plus two gathered units (current + 1 in flight) in bf16, the
  // largest unit being the head (LM head 128,256 x 4,096 + final norm 4,096 = 525,340,672):
  //   2P/8 + 2 x 525,340,672 x 2 = 2,007,565,312 + 2,101,362,688 = 4,108,928,000;
  // gradients / 8 plus that unit's full fp32 gradients before its reduce-scatter:
  //   4P/8 + 525,340,672 x 4 = 6,116,493,312.
  EXPECT_DOUBLE_EQ(fsdp[0].parameters_bytes(), 2 * P / 8 + 2 * kHeadParams * 2);
  EXPECT_DOUBLE_EQ(fsdp[0].gradients_bytes(), 4 * P / 8 + kHeadParams * 4);
  EXPECT_DOUBLE_EQ(fsdp[0].optimizer_bytes(), 12 * P / 8);
  // Activations do not depend on sharding: one micro-batch of 32 layers + head
  //   = 32 x 285,474,816 + 1,084,227,584 = 10,219,421,696 (1F1B at pp 1 holds one at a time).
  for (const auto* m : {&none, &z1, &z2, &fsdp}) {
    EXPECT_DOUBLE_EQ((*m)[0].activations_bytes(), 32 * kLayerActivations + kHeadActivations);
    EXPECT_EQ((*m)[0].comm_buffers_bytes(), 0);  // no pipeline
  }
}

TEST(MemoryModel, FsdpPrefetchKeepsMoreLayersGathered) {
  pb::Plan p;
  plan::ResolvedPlan r = plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_FSDP);
  r.plan.set_prefetch_buckets(2);
  const auto m = memory_per_stage(r);
  // 1 current + 2 prefetched units of the largest size (the head): 2P/8 + 3 x 525,340,672 x 2.
  EXPECT_DOUBLE_EQ(m[0].parameters_bytes(), 2 * P / 8 + 3 * kHeadParams * 2);
}

TEST(MemoryModel, OomVerdictFlipsWhereTheStatesStopFitting) {
  // llama3-8b DDP: 18 P = 144.5 GB of states alone > 85.5 GB (81,559 MiB).
  const auto none = memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_NONE));
  EXPECT_TRUE(none[0].oom());
  // ZeRO-1: 7.5 P = 60,226,959,360 + activations 10,219,421,696 + 1.15 GiB + 8 % of activations
  // (2,052,356,833.28) = 72,498,737,889.28 bytes < 85.5 GB.
  const auto z1 = memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1));
  EXPECT_FALSE(z1[0].oom());
  const double act = 32 * kLayerActivations + kHeadActivations;
  EXPECT_NEAR(z1[0].peak_bytes(), 7.5 * P + act + kGpuRuntimeBytes + 0.08 * act, 1.0);
  // llama3-70b (~70.6e9 parameters) on 8 GPUs: even fully sharded, 18 P / 8 = 2.25 P ~ 159 GB.
  for (pb::Sharding s : {pb::SHARDING_NONE, pb::SHARDING_ZERO1, pb::SHARDING_FSDP}) {
    const auto m = memory_per_stage(plan("llama3-70b", 1, 1, 8, 8, s));
    expect_consistent(m[0]);
    EXPECT_TRUE(m[0].oom()) << pb::Sharding_Name(s);
    EXPECT_GT(m[0].optimizer_bytes(), 12 * 70e9 / 8);
  }
}

TEST(MemoryModel, OneFOneBActivationsScaleWithPpMinusRank) {
  // pp 4, dp 2, 16 sequences: M = 16 / 2 = 8 micro-batches. Stage p holds layers 8p..8p+7
  // (8 x 285,474,816 = 2,283,798,528 per micro-batch); the last also the head. 1F1B stashes
  // pp - p micro-batches on stage p.
  const plan::ResolvedPlan r = plan("llama3-8b", 1, 4, 2, 16, pb::SHARDING_ZERO1);
  const auto m = memory_per_stage(r);
  ASSERT_EQ(m.size(), 4u);
  const double stage = 8 * kLayerActivations;
  EXPECT_DOUBLE_EQ(m[0].activations_bytes(), 4 * stage);                       // 9,135,194,112
  EXPECT_DOUBLE_EQ(m[1].activations_bytes(), 3 * stage);                       // 6,851,395,584
  EXPECT_DOUBLE_EQ(m[2].activations_bytes(), 2 * stage);                       // 4,567,597,056
  EXPECT_DOUBLE_EQ(m[3].activations_bytes(), 1 * (stage + kHeadActivations));  // 3,368,026,112
  for (int p = 0; p < 4; ++p) {
    expect_consistent(m[static_cast<size_t>(p)]);
    // The representative rank of stage p: tp = cp = dp = 0, rank = p x tp x cp x dp = 2 p.
    EXPECT_EQ(m[static_cast<size_t>(p)].rank(), 2 * p);
    // Two send and two receive buffers of one micro-batch's hidden states:
    // 4 x 2048 x 4096 x 2 B = 67,108,864.
    EXPECT_EQ(m[static_cast<size_t>(p)].comm_buffers_bytes(), 67108864.0);
  }
  // Weights: stage 0 has the embedding, stage 3 the final norm and LM head.
  EXPECT_DOUBLE_EQ(m[0].parameters_bytes(), 2 * (8 * kLayerParams + 525336576.0));
  EXPECT_DOUBLE_EQ(m[1].parameters_bytes(), 2 * 8 * kLayerParams);
  EXPECT_DOUBLE_EQ(m[3].parameters_bytes(), 2 * (8 * kLayerParams + 525336576.0 + 4096));
  // GPipe stashes all 8 micro-batches on every stage.
  const auto g = memory_per_stage(plan("llama3-8b", 1, 4, 2, 16, pb::SHARDING_ZERO1,
                                       pb::RECOMPUTE_NONE, 1, pb::PIPELINE_SCHEDULE_GPIPE));
  EXPECT_DOUBLE_EQ(g[1].activations_bytes(), 8 * stage);
  EXPECT_DOUBLE_EQ(g[3].activations_bytes(), 8 * (stage + kHeadActivations));
}

TEST(MemoryModel, InterleavedActivationsFollowItsWarmUp) {
  // pp 4, vp 2: 8 virtual stages of 4 layers (4 x 285,474,816 = 1,141,899,264 per chunk and
  // micro-batch); M = 8. Megatron's warm-up on rank p is (pp - p - 1) x 2 + (vp - 1) x pp
  // micro-steps, and one more forward runs before the first backward:
  //   rank 0: 3 x 2 + 4 = 10, so 11 chunks in flight = 12,560,891,904 bytes;
  //   rank 3: 0 + 4 = 4, so 5 in flight: chunk 0 of micro-batches 0..3 (stage 3) and chunk 1 of
  //   micro-batch 0 (stage 7, with the head): 5 x 1,141,899,264 + 1,084,227,584 = 6,793,723,904.
  const auto m =
      memory_per_stage(plan("llama3-8b", 1, 4, 2, 16, pb::SHARDING_ZERO1, pb::RECOMPUTE_NONE, 2));
  const double chunk = 4 * kLayerActivations;
  EXPECT_DOUBLE_EQ(m[0].activations_bytes(), 11 * chunk);
  EXPECT_DOUBLE_EQ(m[3].activations_bytes(), 5 * chunk + kHeadActivations);
}

TEST(MemoryModel, FullRecomputeKeepsLayerInputsAndOneLayer) {
  // Full: each layer keeps only its input, 2048 x 4096 x 2 B = 16,777,216 (x 32 = 536,870,912);
  // the head is not recomputed (1,084,227,584); while a layer is recomputed for its backward its
  // full 285,474,816 are alive once: 536,870,912 + 1,084,227,584 + 285,474,816 = 1,906,573,312.
  const auto full =
      memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1, pb::RECOMPUTE_FULL));
  EXPECT_DOUBLE_EQ(full[0].activations_bytes(),
                   32 * 16777216.0 + kHeadActivations + kLayerActivations);
  EXPECT_DOUBLE_EQ(full[0].activations_bytes(), 1906573312.0);
  // Selective: drops only the attention core's log-sum-exp (with flash attention the s x s terms
  // never exist): 32 x (285,474,816 - 262,144) + 1,084,227,584 = 10,211,033,088.
  const auto sel =
      memory_per_stage(plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1, pb::RECOMPUTE_SELECTIVE));
  EXPECT_DOUBLE_EQ(sel[0].activations_bytes(),
                   32 * (kLayerActivations - 262144) + kHeadActivations);
  // Op-level selective checkpointing (torchtitan's "op" policy, plan/op_sac.hpp) keeps a layer's
  // input (2sh = 16,777,216) and the outputs of attention (O 2sh + log-sum-exp 262,144) and of the
  // 1st, 3rd, 5th and 7th matmul: q 2sh, v 0.5sh (8 KV heads x 128 x 2 B = 1,024 B per token),
  // the gate 7sh, down 2sh: 113,508,352 kept; the re-run then holds the layer's other
  // 285,474,816 - 113,508,352 = 171,966,464 once.
  const auto op_sac = memory_per_stage(
      plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1, pb::RECOMPUTE_SELECTIVE_OP));
  constexpr double kKept = 16777216.0 + 16777216 + 262144 + 4194304 + 58720256 + 16777216;
  EXPECT_EQ(kKept, 113508352.0);
  EXPECT_DOUBLE_EQ(op_sac[0].activations_bytes(),
                   32 * (16777216.0 + kKept) + kHeadActivations + (kLayerActivations - kKept));
  // States are untouched by recomputation.
  EXPECT_DOUBLE_EQ(full[0].parameters_bytes(), 2 * P);
  EXPECT_DOUBLE_EQ(sel[0].optimizer_bytes(), 12 * P / 8);
}

TEST(MemoryModel, EveryNthLayerRecomputedKeepsTheOthersWhole) {
  // recompute_every 4 (torchtitan's layer-level checkpointing): layers 4, 8, ..., 32 (8 of 32)
  // keep their input only, the other 24 everything; one recomputed layer is re-materialized at a
  // time: 8 x 16,777,216 + 24 x 285,474,816 + 1,084,227,584 + 285,474,816.
  plan::ResolvedPlan r = plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1, pb::RECOMPUTE_FULL);
  r.plan.set_recompute_every(4);
  EXPECT_FALSE(r.recomputes_layer(0));
  EXPECT_TRUE(r.recomputes_layer(3));
  EXPECT_TRUE(r.recomputes_layer(31));
  const auto m = memory_per_stage(r);
  EXPECT_DOUBLE_EQ(m[0].activations_bytes(),
                   8 * 16777216.0 + 24 * kLayerActivations + kHeadActivations + kLayerActivations);
  // Every layer (recompute_every 1) is plain full recomputation.
  r.plan.set_recompute_every(1);
  EXPECT_DOUBLE_EQ(memory_per_stage(r)[0].activations_bytes(), 1906573312.0);
}

TEST(MemoryModel, RecomputeModulesDropWhatTheyReRun) {
  // layernorm: each block norm's output, as large as its input (2sh = 16,777,216), twice a
  // layer; with core_attn also the log-sum-exp (262,144):
  //   32 x (285,474,816 - 2 x 16,777,216 - 262,144) + 1,084,227,584.
  plan::ResolvedPlan r = plan("llama3-8b", 1, 1, 8, 8, pb::SHARDING_ZERO1, pb::RECOMPUTE_SELECTIVE);
  r.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_LAYERNORM);
  EXPECT_DOUBLE_EQ(memory_per_stage(r)[0].activations_bytes(),
                   32 * (kLayerActivations - 2 * 16777216.0) + kHeadActivations);
  r.plan.add_recompute_modules(pb::RECOMPUTE_MODULE_CORE_ATTN);
  EXPECT_DOUBLE_EQ(memory_per_stage(r)[0].activations_bytes(),
                   32 * (kLayerActivations - 2 * 16777216.0 - 262144) + kHeadActivations);
}

TEST(MemoryModel, TensorParallelismSplitsWeightsAndMostActivations) {
  // tp 8 on one node, dp 1: weights are split except the 2 x 32 + 1 RMSNorm weights of 4096:
  // layer 218,112,000 / 8 + 8,192 x 7 / 8 = 27,271,168 (norms replicated); embedding and head
  // 128256 / 8 x 4096 = 65,667,072 each; final norm 4096.
  const plan::ResolvedPlan r = plan("llama3-8b", 8, 1, 1, 1, pb::SHARDING_NONE);
  const auto m = memory_per_stage(r);
  const double layer = (kLayerParams - 8192) / 8 + 8192;
  EXPECT_EQ(layer, 27271168.0);
  EXPECT_DOUBLE_EQ(m[0].parameters_bytes(), 2 * (32 * layer + 2 * 65667072.0 + 4096));
}

// The policy counts plain matmuls only: a materialized attention's batched matmuls (attn.scores,
// attn.context) are re-run whole and shift no projection's turn, so llama3-8b keeps q and v of
// attn.qkv (k re-run: 1,024 of 6,144 columns), re-runs attn.out and up, keeps gate and down, with
// either attention kernel.
TEST(OpLevelCheckpointing, MaterializedAttentionBatchedMatmulsAreNotCounted) {
  const pb::ModelSpec spec = models::load_model("llama3-8b");
  for (const bool flash : {true, false}) {
    models::ShardContext ctx;
    ctx.micro_batch = 1;
    ctx.seq_len = 1024;
    ctx.flash_attention = flash;
    const auto ops = models::layer_ops(spec, models::LayerPart::kDecoder, 0, ctx);
    const auto split = plan::op_sac_split(ops, spec, 2);
    ASSERT_EQ(split.size(), ops.size());
    std::map<std::string, plan::OpSacSplit> by_name;
    for (size_t i = 0; i < ops.size(); ++i) by_name[ops[i].name] = split[i];
    EXPECT_DOUBLE_EQ(by_name["attn.qkv"].recompute_fraction, 1024.0 / 6144) << flash;
    EXPECT_DOUBLE_EQ(by_name["attn.out"].recompute_fraction, 1) << flash;
    EXPECT_DOUBLE_EQ(by_name["mlp.up"].recompute_fraction, 0.5) << flash;
    EXPECT_DOUBLE_EQ(by_name["mlp.down"].recompute_fraction, 0) << flash;
    EXPECT_DOUBLE_EQ(by_name["mlp.down"].kept_bytes, 1024.0 * 4096 * 2) << flash;
    if (!flash) {
      for (const char* bmm : {"attn.scores", "attn.context"}) {
        EXPECT_DOUBLE_EQ(by_name[bmm].recompute_fraction, 1) << bmm;
        EXPECT_DOUBLE_EQ(by_name[bmm].kept_bytes, 0) << bmm;
      }
    }
  }
}

}  // namespace
}  // namespace orrery::sim
