// Whole-model figures summed from the op decomposition on one unsharded rank, so parameter and
// FLOP counts can never disagree with what the simulator and executor run.
#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models {
namespace {

bool routed_expert_op(const LayerOp& op) { return op.name.rfind("moe.experts.", 0) == 0; }

bool embedding_table(const LayerOp& op, const pb::ModelSpec& spec) {
  return op.op_class == pb::OP_CLASS_EMBEDDING || (op.name == "head.lm" && !spec.tied_embeddings());
}

// Width that the attention term of the approximation multiplies (see ModelStats).
double attention_width(const pb::ModelSpec& spec) {
  if (spec.has_mla()) {
    const auto& mla = spec.mla();
    const double qk = static_cast<double>(mla.qk_nope_head_dim() + mla.qk_rope_head_dim());
    return static_cast<double>(spec.num_attention_heads()) * (qk + mla.v_head_dim()) / 2;
  }
  return static_cast<double>(spec.num_attention_heads()) * head_dim(spec);
}

}  // namespace

ModelStats model_stats(const pb::ModelSpec& spec, int64_t seq_len) {
  ShardContext ctx;
  ctx.micro_batch = 1;
  ctx.seq_len = seq_len;
  ModelStats stats;
  double flops = 0;
  auto add = [&](const std::vector<LayerOp>& ops) {
    for (const LayerOp& op : ops) {
      stats.parameters += op.parameters;
      // Each token runs top_k of the num_experts routed experts.
      stats.active_parameters += routed_expert_op(op)
                                     ? op.parameters * static_cast<double>(spec.moe().top_k()) /
                                           static_cast<double>(spec.moe().num_experts())
                                     : op.parameters;
      if (embedding_table(op, spec)) stats.embedding_parameters += op.parameters;
      flops += op.forward_flops + op.backward_flops;
    }
  };
  add(layer_ops(spec, LayerPart::kEmbedding, 0, ctx));
  for (int64_t layer = 0; layer < spec.num_layers(); ++layer) {
    add(layer_ops(spec, LayerPart::kDecoder, layer, ctx));
  }
  add(layer_ops(spec, LayerPart::kHead, 0, ctx));
  const double tokens = static_cast<double>(seq_len);
  stats.training_flops_per_token = flops / tokens;
  const double output_gemm = static_cast<double>(spec.vocab_size()) * spec.hidden_size();
  stats.approx_flops_per_token =
      6 * (stats.active_parameters - stats.embedding_parameters) + 6 * output_gemm +
      12 * static_cast<double>(spec.num_layers()) * tokens * attention_width(spec);
  return stats;
}

}  // namespace orrery::models
