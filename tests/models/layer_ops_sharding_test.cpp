// Sharding invariants of the decomposition: TP splits GEMM work and weights exactly, SP splits
// the norms, CP splits the queries, EP splits the experts.
#include <algorithm>

#include <gtest/gtest.h>

#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models {
namespace {

const LayerOp& find(const std::vector<LayerOp>& ops, const std::string& name) {
  auto it =
      std::find_if(ops.begin(), ops.end(), [&](const LayerOp& op) { return op.name == name; });
  if (it == ops.end()) throw std::runtime_error("no op " + name);
  return *it;
}

struct Sums {
  double gemm_flops = 0, gemm_params = 0, attention_flops = 0;
};

Sums sums(const pb::ModelSpec& spec, const ShardContext& ctx) {
  Sums s;
  auto add = [&](const std::vector<LayerOp>& ops) {
    for (const auto& op : ops) {
      if (op.op_class == pb::OP_CLASS_GEMM) {
        s.gemm_flops += op.forward_flops + op.backward_flops;
        s.gemm_params += op.parameters;
      }
      if (op.op_class == pb::OP_CLASS_ATTENTION) s.attention_flops += op.forward_flops;
    }
  };
  add(layer_ops(spec, LayerPart::kDecoder, 0, ctx));
  add(layer_ops(spec, LayerPart::kHead, 0, ctx));
  return s;
}

ShardContext context(int64_t seq) {
  ShardContext ctx;
  ctx.seq_len = seq;
  ctx.micro_batch = 2;
  return ctx;
}

// Llama 3 70B has no biases and a vocabulary (128256) divisible by 8, so every GEMM and its
// weights split exactly: tp ranks together do the unsharded work.
TEST(Sharding, TensorParallelSplitsGemmsExactly) {
  const pb::ModelSpec spec = preset("llama3-70b");
  const Sums one = sums(spec, context(4096));
  for (int64_t tp : {2, 4, 8}) {
    ShardContext ctx = context(4096);
    ctx.tp = tp;
    const Sums rank = sums(spec, ctx);
    EXPECT_DOUBLE_EQ(rank.gemm_flops * tp, one.gemm_flops) << tp;
    EXPECT_DOUBLE_EQ(rank.gemm_params * tp, one.gemm_params) << tp;
    EXPECT_DOUBLE_EQ(rank.attention_flops * tp, one.attention_flops) << tp;
  }
}

TEST(Sharding, TensorParallelCommunicatesAfterRowParallelGemms) {
  ShardContext ctx = context(4096);
  ctx.tp = 8;
  const auto ops = layer_ops(preset("llama3-70b"), LayerPart::kDecoder, 0, ctx);
  // micro_batch 2 * 4096 tokens * 8192 hidden * 2 bytes.
  const double bytes = 2.0 * 4096 * 8192 * 2;
  EXPECT_DOUBLE_EQ(find(ops, "attn.out").tp_comm_bytes, bytes);
  EXPECT_DOUBLE_EQ(find(ops, "mlp.down").tp_comm_bytes, bytes);
  double others = 0;
  for (const auto& op : ops) others += op.tp_comm_bytes;
  EXPECT_DOUBLE_EQ(others, 2 * bytes);
  // Column parallel: 64/8 query heads and 8/8 KV heads of 128; row parallel: k = 28672 / 8.
  EXPECT_EQ(find(ops, "attn.qkv").shape, (std::vector<int64_t>{8192, (8 + 2) * 128, 8192}));
  EXPECT_EQ(find(ops, "mlp.down").shape, (std::vector<int64_t>{8192, 8192, 3584}));
}

TEST(Sharding, SequenceParallelSplitsNormsAndResiduals) {
  ShardContext ctx = context(4096);
  ctx.tp = 8;
  const auto plain = layer_ops(preset("llama3-70b"), LayerPart::kDecoder, 0, ctx);
  ctx.sequence_parallel = true;
  const auto sp = layer_ops(preset("llama3-70b"), LayerPart::kDecoder, 0, ctx);
  for (const char* name : {"attn.norm", "mlp.norm", "attn.residual", "mlp.residual"}) {
    EXPECT_DOUBLE_EQ(find(sp, name).forward_flops * 8, find(plain, name).forward_flops) << name;
    EXPECT_EQ(find(sp, name).shape[0] * 8, find(plain, name).shape[0]) << name;
  }
  // GEMMs still see every token (gathered before the column-parallel GEMM).
  EXPECT_EQ(find(sp, "attn.qkv").shape, find(plain, "attn.qkv").shape);
}

TEST(Sharding, ContextParallelSplitsTheQueries) {
  const pb::ModelSpec spec = preset("llama3-8b");
  const auto one = layer_ops(spec, LayerPart::kDecoder, 0, context(8192));
  ShardContext ctx = context(8192);
  ctx.cp = 2;
  const auto half = layer_ops(spec, LayerPart::kDecoder, 0, ctx);
  const LayerOp& core = find(half, "attn.core");
  EXPECT_EQ(core.shape, (std::vector<int64_t>{2, 32, 4096, 8192, 128}));
  EXPECT_DOUBLE_EQ(core.forward_flops * 2, find(one, "attn.core").forward_flops);
  // The local K and V chunk circulates: 2 sequences * 4096 tokens * 8 KV heads * (128 + 128) * 2 B.
  EXPECT_DOUBLE_EQ(core.cp_kv_bytes, 2.0 * 4096 * 8 * 256 * 2);
  EXPECT_EQ(find(one, "attn.core").cp_kv_bytes, 0);
  EXPECT_EQ(find(half, "attn.qkv").shape[0], 2 * 4096);
}

TEST(Sharding, ExpertParallelDividesExperts) {
  const pb::ModelSpec spec = preset("mixtral-8x7b");
  const auto one = layer_ops(spec, LayerPart::kDecoder, 0, context(4096));
  ShardContext ctx = context(4096);
  ctx.ep = 4;
  const auto ep = layer_ops(spec, LayerPart::kDecoder, 0, ctx);
  for (const char* name : {"moe.experts.up", "moe.experts.down"}) {
    EXPECT_DOUBLE_EQ(find(ep, name).parameters * 4, find(one, name).parameters) << name;
    // Each EP rank brings its own micro-batch: the rank's experts see tokens * top_k pairs.
    EXPECT_DOUBLE_EQ(find(ep, name).forward_flops, find(one, name).forward_flops) << name;
  }
  // Dispatch: 8192 tokens * top-2 * 4096 hidden * 2 B, 3/4 of it to the other ranks.
  const double alltoall = 8192.0 * 2 * 4096 * 2 * 3 / 4;
  EXPECT_DOUBLE_EQ(find(ep, "moe.router").ep_alltoall_bytes, alltoall);
  EXPECT_DOUBLE_EQ(find(ep, "moe.experts.down").ep_alltoall_bytes, alltoall);
  ctx.moe_imbalance = 1.5;  // the busiest rank
  const auto busy = layer_ops(spec, LayerPart::kDecoder, 0, ctx);
  EXPECT_DOUBLE_EQ(find(busy, "moe.experts.up").forward_flops,
                   1.5 * find(one, "moe.experts.up").forward_flops);
}

TEST(Sharding, MlaDownProjectionsAreReplicated) {
  const pb::ModelSpec spec = preset("deepseek-v3");
  const auto one = layer_ops(spec, LayerPart::kDecoder, 3, context(4096));
  ShardContext ctx = context(4096);
  ctx.tp = 8;
  ctx.ep = 8;
  const auto tp = layer_ops(spec, LayerPart::kDecoder, 3, ctx);
  EXPECT_DOUBLE_EQ(find(tp, "attn.kv_down").parameters, find(one, "attn.kv_down").parameters);
  EXPECT_DOUBLE_EQ(find(tp, "attn.kv_up").parameters * 8, find(one, "attn.kv_up").parameters);
  // 256 experts / 8 = 32 per rank, each 2048 / 8 columns wide.
  EXPECT_DOUBLE_EQ(find(tp, "moe.experts.up").parameters * 64,
                   find(one, "moe.experts.up").parameters);
}

}  // namespace
}  // namespace orrery::models
