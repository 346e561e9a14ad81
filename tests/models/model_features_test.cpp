// The model features beyond the plain pre-norm decoder (docs/models.md#attention-variants):
// sliding-window attention and its per-layer pattern, ALiBi, tanh soft-capping, the parallel
// attention+MLP block and post-block norms, each pinned against hand arithmetic on `tiny`
// (hidden 64, 4 query heads and 2 KV heads of 16, SwiGLU FFN 128, vocabulary 256).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "orrery/base/error.hpp"
#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models {
namespace {

std::vector<std::string> names(const std::vector<LayerOp>& ops) {
  std::vector<std::string> out;
  for (const auto& op : ops) out.push_back(op.name);
  return out;
}

LayerOp find(const std::vector<LayerOp>& ops, const std::string& name) {
  auto it =
      std::find_if(ops.begin(), ops.end(), [&](const LayerOp& op) { return op.name == name; });
  if (it == ops.end()) throw std::runtime_error("no op " + name);
  return *it;
}

double sum(const std::vector<LayerOp>& ops, double LayerOp::*field) {
  return std::accumulate(ops.begin(), ops.end(), 0.0,
                         [&](double a, const LayerOp& op) { return a + op.*field; });
}

ShardContext context(int64_t seq, bool flash = true, int64_t tp = 1) {
  ShardContext ctx;
  ctx.seq_len = seq;
  ctx.flash_attention = flash;
  ctx.tp = tp;
  return ctx;
}

std::vector<LayerOp> decoder(const pb::ModelSpec& spec, int64_t layer, const ShardContext& ctx) {
  return layer_ops(spec, LayerPart::kDecoder, layer, ctx);
}

TEST(SlidingWindow, AttentionCoreCountsTheBand) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_sliding_window(16);
  // s = 64, w = 16: the first 16 queries see 1..16 keys (the triangle, 16^2 / 2 = 128 pairs),
  // the other 48 see 16 each (768): 896 pairs per head, against 64^2 / 2 = 2048 without a window.
  // Forward 2 * (d_qk + d_v) = 64 FLOPs per pair and head, 4 heads: 4 * 896 * 64 = 229,376.
  const LayerOp& local = find(decoder(spec, 0, context(64)), "attn.core");
  EXPECT_DOUBLE_EQ(local.forward_flops, 229376);
  EXPECT_DOUBLE_EQ(local.backward_flops, 2.5 * 229376);  // FlashAttention-2's five matmuls
  const LayerOp& full = find(decoder(preset("tiny"), 0, context(64)), "attn.core");
  EXPECT_DOUBLE_EQ(full.forward_flops, 4.0 * 2048 * 64);
  // The kernel keeps Q, K, V and one log-sum-exp per query row whatever the window.
  EXPECT_DOUBLE_EQ(local.saved_activation_bytes, full.saved_activation_bytes);
  // A window as long as the sequence is full attention.
  spec.set_sliding_window(64);
  EXPECT_DOUBLE_EQ(find(decoder(spec, 0, context(64)), "attn.core").forward_flops,
                   full.forward_flops);
}

TEST(SlidingWindow, MaterializedScoresAreTheFullSquare) {
  // The window is part of the mask: QK^T, softmax and PV over all 64 x 64 scores either way.
  pb::ModelSpec spec = preset("tiny");
  spec.set_sliding_window(16);
  const auto local = decoder(spec, 0, context(64, false));
  const auto full = decoder(preset("tiny"), 0, context(64, false));
  EXPECT_DOUBLE_EQ(sum(local, &LayerOp::forward_flops), sum(full, &LayerOp::forward_flops));
  EXPECT_DOUBLE_EQ(sum(local, &LayerOp::saved_activation_bytes),
                   sum(full, &LayerOp::saved_activation_bytes));
}

TEST(SlidingWindow, PatternMakesEveryPthLayerGlobal) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_num_layers(12);
  EXPECT_FALSE(is_local_attention_layer(spec, 0));  // no window
  spec.set_sliding_window(16);
  EXPECT_TRUE(is_local_attention_layer(spec, 11));  // pattern 0: every layer
  spec.set_sliding_window_pattern(6);               // Gemma 3: 5 local, then 1 global
  std::vector<int64_t> global;
  for (int64_t l = 0; l < 12; ++l) {
    if (!is_local_attention_layer(spec, l)) global.push_back(l);
  }
  EXPECT_EQ(global, (std::vector<int64_t>{5, 11}));
  spec.set_sliding_window_pattern(2);  // Gemma 2: even layers local, odd global
  EXPECT_TRUE(is_local_attention_layer(spec, 0));
  EXPECT_FALSE(is_local_attention_layer(spec, 1));
  // The global layer's core is the full triangle, the local one's the band.
  EXPECT_DOUBLE_EQ(find(decoder(spec, 1, context(64)), "attn.core").forward_flops, 4.0 * 2048 * 64);
  EXPECT_DOUBLE_EQ(find(decoder(spec, 0, context(64)), "attn.core").forward_flops, 229376);
}

TEST(SlidingWindow, ModelFlopsFollowThePattern) {
  // Two layers, pattern 2: layer 0 local (896 pairs per head), layer 1 global (2048). Per token,
  // training (forward + 2.5x backward) attention FLOPs drop by 4 heads * 64 FLOPs * 3.5 *
  // (2048 - 896) / 64 tokens = 16,128 FLOPs.
  pb::ModelSpec spec = preset("tiny");
  const double full = model_stats(spec, 64).training_flops_per_token;
  spec.set_sliding_window(16);
  spec.set_sliding_window_pattern(2);
  EXPECT_DOUBLE_EQ(full - model_stats(spec, 64).training_flops_per_token, 16128);
}

TEST(Alibi, BiasAddInsideTheKernelOrTheScoresGemm) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_position_embedding(pb::POSITION_EMBEDDING_ALIBI);
  // No RoPE op, no parameters. Flash: one add per computed pair and head (4 * 2048), in forward
  // and again when backward recomputes the scores.
  const auto ops = decoder(spec, 0, context(64));
  const auto n = names(ops);
  EXPECT_EQ(std::count(n.begin(), n.end(), "attn.rope"), 0);
  const LayerOp& core = find(ops, "attn.core");
  EXPECT_DOUBLE_EQ(core.forward_flops, 4.0 * 2048 * 64 + 4.0 * 2048);
  EXPECT_DOUBLE_EQ(core.backward_flops, 2.5 * 4.0 * 2048 * 64 + 4.0 * 2048);
  // Materialized: the QK^T GEMM adds the [heads, 1, s] bias in its epilogue (BLOOM's baddbmm):
  // + 4 * 64 * 64 FLOPs, + 4 * 64 * 2 bytes read.
  const LayerOp& scores = find(decoder(spec, 0, context(64, false)), "attn.scores");
  const LayerOp& plain = find(decoder(preset("tiny"), 0, context(64, false)), "attn.scores");
  EXPECT_DOUBLE_EQ(scores.forward_flops - plain.forward_flops, 4.0 * 64 * 64);
  EXPECT_DOUBLE_EQ(scores.forward_bytes_read - plain.forward_bytes_read, 4.0 * 64 * 2);
  EXPECT_DOUBLE_EQ(model_stats(spec, 64).parameters, model_stats(preset("tiny"), 64).parameters);
}

TEST(Softcap, AttentionScoresInTheKernelOrAsAKernel) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_attn_logit_softcapping(50);
  // Flash: 3 FLOPs per pair forward (divide, tanh, multiply); backward recomputes them and
  // applies the derivative, 6.
  const LayerOp& core = find(decoder(spec, 0, context(64)), "attn.core");
  EXPECT_DOUBLE_EQ(core.forward_flops, 4.0 * 2048 * 64 + 3 * 4.0 * 2048);
  EXPECT_DOUBLE_EQ(core.backward_flops, 2.5 * 4.0 * 2048 * 64 + 6 * 4.0 * 2048);
  // Materialized: its own kernel after QK^T over the 4 * 64 * 64 = 16,384 scores, keeping its
  // bf16 output (32,768 bytes), which selective recomputation drops.
  const auto ops = decoder(spec, 0, context(64, false));
  const auto n = names(ops);
  const auto at = std::find(n.begin(), n.end(), "attn.softcap");
  ASSERT_NE(at, n.end());
  EXPECT_EQ(*(at - 1), "attn.scores");
  const LayerOp& cap = find(ops, "attn.softcap");
  EXPECT_EQ(cap.shape, (std::vector<int64_t>{16384}));
  EXPECT_DOUBLE_EQ(cap.forward_flops, 3 * 16384);
  EXPECT_DOUBLE_EQ(cap.saved_activation_bytes, 32768);
  EXPECT_DOUBLE_EQ(cap.selective_recompute_bytes, 32768);
}

TEST(Softcap, FinalLogitsBetweenTheHeadAndTheLoss) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_final_logit_softcapping(30);
  const auto head = layer_ops(spec, LayerPart::kHead, 0, context(64));
  EXPECT_EQ(names(head),
            (std::vector<std::string>{"head.norm", "head.lm", "head.softcap", "head.loss"}));
  // 64 tokens x 256 logits = 16,384 elements, 3 FLOPs each; keeps its bf16 output.
  EXPECT_DOUBLE_EQ(find(head, "head.softcap").forward_flops, 3 * 16384);
  EXPECT_DOUBLE_EQ(find(head, "head.softcap").saved_activation_bytes, 2 * 16384);
}

TEST(ParallelBlock, OneNormOneResidualOneReduction) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_parallel_block(true);
  const auto ops = decoder(spec, 0, context(64, true, 2));
  EXPECT_EQ(names(ops), (std::vector<std::string>{"attn.norm", "attn.qkv", "attn.rope", "attn.core",
                                                  "attn.out", "mlp.up", "mlp.act", "mlp.down",
                                                  "block.sum", "block.residual"}));
  // The TP reduction moves to the sum of both outputs: 64 tokens x 64 hidden x 2 bytes.
  EXPECT_DOUBLE_EQ(find(ops, "attn.out").tp_comm_bytes, 0);
  EXPECT_DOUBLE_EQ(find(ops, "mlp.down").tp_comm_bytes, 0);
  EXPECT_DOUBLE_EQ(find(ops, "block.sum").tp_comm_bytes, 8192);
  EXPECT_DOUBLE_EQ(sum(ops, &LayerOp::tp_comm_bytes), 8192);
  const auto sequential = decoder(preset("tiny"), 0, context(64, true, 2));
  EXPECT_DOUBLE_EQ(sum(sequential, &LayerOp::tp_comm_bytes), 2 * 8192);
  // One norm's weights fewer (64), and neither mlp.norm's input nor mlp.up's (the same
  // normalized tensor attn.qkv keeps) is saved: 2 x 64 x 64 x 2 bytes fewer.
  EXPECT_DOUBLE_EQ(sum(sequential, &LayerOp::parameters) - sum(ops, &LayerOp::parameters), 64);
  EXPECT_DOUBLE_EQ(sum(sequential, &LayerOp::saved_activation_bytes) -
                       sum(ops, &LayerOp::saved_activation_bytes),
                   2 * 64 * 64 * 2);
}

TEST(PostBlockNorm, ANormOnEachBlocksOutput) {
  pb::ModelSpec spec = preset("tiny");
  spec.set_post_block_norm(true);
  const auto ops = decoder(spec, 0, context(64));
  const auto n = names(ops);
  EXPECT_EQ(*(std::find(n.begin(), n.end(), "attn.post_norm") - 1), "attn.out");
  EXPECT_EQ(*(std::find(n.begin(), n.end(), "mlp.post_norm") - 1), "mlp.down");
  EXPECT_DOUBLE_EQ(model_stats(spec, 64).parameters - model_stats(preset("tiny"), 64).parameters,
                   2 * 2 * 64);  // two RMSNorm weights of 64 per layer, 2 layers
}

TEST(ModelFeatures, ValidationNamesTheFieldAndTheReason) {
  auto problem = [](void (*set)(pb::ModelSpec&)) {
    pb::ModelSpec spec = preset("tiny");
    set(spec);
    try {
      validate_model(spec, SourceMap());
    } catch (const base::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(problem([](pb::ModelSpec& m) { m.set_sliding_window_pattern(2); }),
            "sliding_window_pattern: got 2, but sliding_window is 0 (no layer is local)");
  EXPECT_EQ(problem([](pb::ModelSpec& m) {
              m.set_sliding_window(8);
              m.set_sliding_window_pattern(1);
            }),
            "sliding_window_pattern: got 1, which makes every layer global: leave sliding_window "
            "out instead");
  EXPECT_EQ(problem([](pb::ModelSpec& m) { m.set_final_logit_softcapping(-1); }),
            "final_logit_softcapping: got -1, expected a value >= 0");
  EXPECT_EQ(problem([](pb::ModelSpec& m) {
              m.set_parallel_block(true);
              m.set_post_block_norm(true);
            }),
            "post_block_norm: not modelled with parallel_block (the parallel block sums both "
            "outputs before one residual add)");
}

}  // namespace
}  // namespace orrery::models
