// The op decomposition on one unsharded rank: which ops a layer has and what each computes,
// pinned with hand arithmetic.
#include <algorithm>

#include <gtest/gtest.h>

#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models {
namespace {

std::vector<std::string> names(const std::vector<LayerOp>& ops) {
  std::vector<std::string> out;
  for (const auto& op : ops) out.push_back(op.name);
  return out;
}

const LayerOp& find(const std::vector<LayerOp>& ops, const std::string& name) {
  auto it =
      std::find_if(ops.begin(), ops.end(), [&](const LayerOp& op) { return op.name == name; });
  if (it == ops.end()) throw std::runtime_error("no op " + name);
  return *it;
}

ShardContext context(int64_t seq, int64_t micro_batch = 1) {
  ShardContext ctx;
  ctx.seq_len = seq;
  ctx.micro_batch = micro_batch;
  return ctx;
}

TEST(LayerOps, DenseDecoderLayer) {
  const auto ops = layer_ops(preset("tiny"), LayerPart::kDecoder, 0, context(64));
  const std::vector<std::string> expected = {
      "attn.norm", "attn.qkv", "attn.rope", "attn.core", "attn.out",    "attn.residual",
      "mlp.norm",  "mlp.up",   "mlp.act",   "mlp.down",  "mlp.residual"};
  EXPECT_EQ(names(ops), expected);
  EXPECT_EQ(find(ops, "attn.core").op_class, pb::OP_CLASS_ATTENTION);
  EXPECT_EQ(find(ops, "attn.norm").op_class, pb::OP_CLASS_NORM);
  EXPECT_EQ(find(ops, "mlp.act").op_class, pb::OP_CLASS_ELEMENTWISE);
  // tiny: 64 tokens, q 4 heads + k, v 2 heads each, of 16: n = (4 + 2 * 2) * 16 = 128, k = 64.
  const LayerOp& qkv = find(ops, "attn.qkv");
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{64, 128, 64}));
  EXPECT_DOUBLE_EQ(qkv.forward_flops, 2.0 * 64 * 128 * 64);
  EXPECT_DOUBLE_EQ(qkv.backward_flops, 2 * qkv.forward_flops);  // data + weight gradients
  EXPECT_DOUBLE_EQ(qkv.parameters, 64.0 * 128);
  // SwiGLU: gate and up fused, 2 * 128 columns.
  EXPECT_EQ(find(ops, "mlp.up").shape, (std::vector<int64_t>{64, 256, 64}));
  EXPECT_EQ(find(ops, "mlp.down").shape, (std::vector<int64_t>{64, 64, 128}));
  // No TP, no collectives.
  for (const auto& op : ops) EXPECT_EQ(op.tp_comm_bytes, 0) << op.name;
}

TEST(LayerOps, CausalAttentionCountsHalfTheSquare) {
  // Llama 3 8B at 8192: full QK^T + PV would be 2 * 32 heads * 8192^2 * (128 + 128) = 1.0995e12
  // per sequence; the causal kernel does half, 5.4976e11; flash backward 2.5x that.
  const auto ops = layer_ops(preset("llama3-8b"), LayerPart::kDecoder, 0, context(8192));
  const LayerOp& core = find(ops, "attn.core");
  EXPECT_EQ(core.shape, (std::vector<int64_t>{1, 32, 8192, 8192, 128}));
  EXPECT_DOUBLE_EQ(core.forward_flops, 0.5 * 2 * 32 * 8192.0 * 8192 * 256);
  EXPECT_DOUBLE_EQ(core.backward_flops, 2.5 * core.forward_flops);
  EXPECT_TRUE(core.selective_recompute);
  // Only flash attention's fp32 log-sum-exp (32 heads * 8192 rows * 4 B) is dropped by selective
  // recomputation; there is no s^2 tensor to drop.
  EXPECT_DOUBLE_EQ(core.selective_recompute_bytes, 32 * 8192 * 4.0);
}

TEST(LayerOps, MoeLayerRoutesTopKTokensPerExpert) {
  const auto ops = layer_ops(preset("mixtral-8x7b"), LayerPart::kDecoder, 0, context(4096));
  const std::vector<std::string> all = names(ops);
  const std::vector<std::string> mlp(all.begin() + 6, all.end());
  EXPECT_EQ(mlp, (std::vector<std::string>{"mlp.norm", "moe.router", "moe.experts.up",
                                           "moe.experts.act", "moe.experts.down", "mlp.residual"}));
  EXPECT_EQ(find(ops, "moe.router").op_class, pb::OP_CLASS_ROUTER);
  // 4096 tokens * top-2 = 8192 expert-token pairs over 8 experts of 2 * 14336 gate+up columns.
  const LayerOp& up = find(ops, "moe.experts.up");
  EXPECT_EQ(up.shape, (std::vector<int64_t>{8192, 28672, 4096}));
  EXPECT_DOUBLE_EQ(up.forward_flops, 2.0 * 8192 * 28672 * 4096);
  EXPECT_DOUBLE_EQ(up.parameters, 8.0 * 4096 * 28672);
  EXPECT_DOUBLE_EQ(find(ops, "moe.router").parameters, 4096.0 * 8);
}

TEST(LayerOps, DeepseekV3DenseThenMoeWithSharedExpertAndMla) {
  const pb::ModelSpec spec = preset("deepseek-v3");
  const auto dense = layer_ops(spec, LayerPart::kDecoder, 2, context(4096));
  const auto moe = layer_ops(spec, LayerPart::kDecoder, 3, context(4096));
  EXPECT_NO_THROW(find(dense, "mlp.up"));
  EXPECT_THROW(find(dense, "moe.router"), std::runtime_error);
  EXPECT_NO_THROW(find(moe, "moe.shared.up"));
  EXPECT_DOUBLE_EQ(find(moe, "moe.shared.up").parameters, 7168.0 * 2 * 2048);
  // MLA: q 1536-rank bottleneck to 128 heads * (128 + 64), kv 512-rank latent + 64 rope dims,
  // up to 128 heads * (128 + 128).
  EXPECT_EQ(find(moe, "attn.q_up").shape, (std::vector<int64_t>{4096, 128 * 192, 1536}));
  EXPECT_EQ(find(moe, "attn.kv_down").shape, (std::vector<int64_t>{4096, 576, 7168}));
  EXPECT_EQ(find(moe, "attn.kv_up").shape, (std::vector<int64_t>{4096, 128 * 256, 512}));
  // Core: QK^T over 192 dims, PV over 128, causal half.
  EXPECT_DOUBLE_EQ(find(moe, "attn.core").forward_flops, 0.5 * 2 * 128 * 4096.0 * 4096 * 320);
  EXPECT_EQ(find(moe, "attn.out").shape, (std::vector<int64_t>{4096, 7168, 128 * 128}));
}

TEST(LayerOps, EmbeddingAndHead) {
  const pb::ModelSpec gpt = preset("gpt3-175b");
  const auto embed = layer_ops(gpt, LayerPart::kEmbedding, 0, context(2048));
  EXPECT_EQ(names(embed),
            (std::vector<std::string>{"embed.tokens", "embed.positions", "embed.dropout"}));
  EXPECT_DOUBLE_EQ(find(embed, "embed.tokens").parameters, 51200.0 * 12288);
  EXPECT_DOUBLE_EQ(find(embed, "embed.positions").parameters, 2048.0 * 12288);
  const auto head = layer_ops(gpt, LayerPart::kHead, 0, context(2048));
  EXPECT_EQ(names(head), (std::vector<std::string>{"head.norm", "head.lm", "head.loss"}));
  EXPECT_EQ(find(head, "head.lm").parameters, 0);  // tied to embed.tokens
  EXPECT_DOUBLE_EQ(find(head, "head.lm").forward_flops, 2.0 * 2048 * 51200 * 12288);
  EXPECT_EQ(find(head, "head.loss").op_class, pb::OP_CLASS_SOFTMAX_LOSS);
  const auto llama_head = layer_ops(preset("llama3-8b"), LayerPart::kHead, 0, context(8192));
  EXPECT_DOUBLE_EQ(find(llama_head, "head.lm").parameters, 128256.0 * 4096);  // untied
}

TEST(LayerOps, EmbeddingBackwardPassesOverItsWholeTable) {
  // llama3-8b at tp 2 (bf16 weights): each rank's table is ceil(128256 / 2) x 4096. Backward
  // writes its gradient (zeroed, 2 bytes an element) and the fp32 accumulation (4), and reads
  // both, on top of the rows forward moved, doubled; forward is the rows alone.
  ShardContext c = context(8192);
  c.tp = 2;
  const auto embed = layer_ops(preset("llama3-8b"), LayerPart::kEmbedding, 0, c);
  const LayerOp& tokens = find(embed, "embed.tokens");
  const double table = 64128.0 * 4096;
  EXPECT_DOUBLE_EQ(tokens.parameters, table);
  EXPECT_DOUBLE_EQ(tokens.backward_extra_bytes_written, table * (2 + 4));
  EXPECT_DOUBLE_EQ(tokens.backward_extra_bytes_read, table * (2 + 4));
  EXPECT_DOUBLE_EQ(tokens.forward_bytes_read, 8192.0 * 4096 * 2);
  // No other op of a layer has such a pass.
  for (const auto& op : layer_ops(preset("llama3-8b"), LayerPart::kDecoder, 0, c)) {
    EXPECT_EQ(op.backward_extra_bytes_read + op.backward_extra_bytes_written, 0) << op.name;
  }
}

TEST(LayerOps, QwenQkNormHasOneWeightForQueriesAndOneForKeys) {
  const auto ops = layer_ops(preset("qwen3-235b-a22b"), LayerPart::kDecoder, 0, context(4096));
  EXPECT_DOUBLE_EQ(find(ops, "attn.q_norm").parameters, 128);
  EXPECT_DOUBLE_EQ(find(ops, "attn.k_norm").parameters, 128);
  EXPECT_EQ(find(ops, "attn.q_norm").shape[0], 4096 * 64 * 128);
}

TEST(LayerOps, ShardProblemsNameTheDimension) {
  const pb::ModelSpec llama = preset("llama3-8b");
  ShardContext ctx = context(8192);
  ctx.tp = 3;
  EXPECT_EQ(shard_problem(llama, ctx), "num_attention_heads (32) is not divisible by tp (3)");
  ctx.tp = 1;
  ctx.cp = 3;
  EXPECT_EQ(shard_problem(llama, ctx), "seq_len (8192) is not divisible by 2 * cp (6)");
  ctx.cp = 1;
  ctx.ep = 2;
  EXPECT_EQ(shard_problem(llama, ctx), "ep > 1 needs an MoE model");
  ctx.ep = 1;
  ctx.tp = 16;  // 8 KV heads: each pair of ranks shares a copy
  EXPECT_EQ(shard_problem(llama, ctx), "");
  ctx.tp = 1;
  ctx.ep = 3;
  EXPECT_EQ(shard_problem(preset("mixtral-8x7b"), ctx),
            "moe.num_experts (8) is not divisible by ep (3)");
  EXPECT_THROW(layer_ops(preset("mixtral-8x7b"), LayerPart::kDecoder, 0, ctx), std::logic_error);
}

}  // namespace
}  // namespace orrery::models
