// layer_ops(): the decoder layer (attention + FFN halves in their own files), the embedding and
// the LM head, plus the sharding rules every part relies on.
#include "orrery/models/layer_ops.hpp"

#include "layer_ops_build.hpp"
#include "orrery/base/error.hpp"

namespace orrery::models {
namespace {

using detail::View;

std::string divides(std::string_view what, int64_t value, std::string_view by, int64_t degree) {
  if (degree > 0 && value % degree == 0) return {};
  return std::string(what) + " (" + std::to_string(value) + ") is not divisible by " +
         std::string(by) + " (" + std::to_string(degree) + ")";
}

std::string degree_problem(const ShardContext& ctx) {
  if (ctx.micro_batch < 1) return "micro_batch must be >= 1";
  if (ctx.seq_len < 1) return "seq_len must be >= 1";
  if (ctx.tp < 1 || ctx.cp < 1 || ctx.ep < 1) return "tp, cp and ep must be >= 1";
  if (!(ctx.activation_bytes > 0) || !(ctx.param_bytes > 0)) {
    return "activation_bytes and param_bytes must be > 0";
  }
  if (!(ctx.moe_imbalance >= 1)) return "moe_imbalance must be >= 1";
  if (!(ctx.moe_capacity_factor >= 0)) return "moe_capacity_factor must be >= 0";
  if (ctx.etp < 0 || ctx.ep_dispatch_copies < 0) return "etp and ep_dispatch_copies must be >= 0";
  // Folded experts route each rank's own tokens: TP ranks must hold different ones.
  if (ctx.etp > 0 && ctx.tp > 1 && !ctx.sequence_parallel)
    return "etp with tp > 1 needs sequence parallelism";
  if (ctx.cp > 1 && !ctx.flash_attention)
    return "context parallelism (ring attention) needs flash attention";
  // Causal CP balances work by giving each rank two chunks of the sequence (Megatron-Core).
  if (ctx.cp > 1) return divides("seq_len", ctx.seq_len, "2 * cp", 2 * ctx.cp);
  return {};
}

std::string ffn_problem(const pb::ModelSpec& spec, const ShardContext& ctx) {
  const bool has_dense = !spec.has_moe() || spec.moe().first_dense_layers() > 0;
  if (has_dense) {
    if (auto p = divides("ffn_hidden_size", spec.ffn_hidden_size(), "tp", ctx.tp); !p.empty())
      return p;
  }
  if (!spec.has_moe()) {
    return ctx.ep > 1 ? "ep > 1 needs an MoE model" : std::string();
  }
  const auto& moe = spec.moe();
  if (auto p = divides("moe.num_experts", moe.num_experts(), "ep", ctx.ep); !p.empty()) return p;
  const bool folded = ctx.etp > 0;
  if (auto p = divides("moe.expert_ffn_hidden_size", moe.expert_ffn_hidden_size(),
                       folded ? "etp" : "tp", folded ? ctx.etp : ctx.tp);
      !p.empty()) {
    return p;
  }
  const int64_t shared = moe.num_shared_experts() * (moe.shared_expert_ffn_hidden_size() > 0
                                                         ? moe.shared_expert_ffn_hidden_size()
                                                         : moe.expert_ffn_hidden_size());
  return divides("shared expert width", shared, "tp", ctx.tp);
}

// An embedding's backward (PyTorch's embedding_dense_backward, on CPU and GPU) allocates its
// table's gradient, zeroes it and adds each token's gradient into its row; the parameter's
// gradient accumulation (Megatron's main_grad hook, autograd's AccumulateGrad) then reads it
// and reads and writes the fp32 gradient. The table is the rank's shard (`op.parameters`).
void dense_table_gradient(LayerOp& op, const ShardContext& ctx) {
  constexpr double kMainGradBytes = 4;
  op.backward_extra_bytes_written = op.parameters * (ctx.param_bytes + kMainGradBytes);
  op.backward_extra_bytes_read = op.parameters * (ctx.param_bytes + kMainGradBytes);
}

std::vector<LayerOp> embedding_ops(const View& v) {
  const auto& spec = v.spec;
  const auto& ctx = v.ctx;
  const int64_t h = spec.hidden_size();
  const double elements = static_cast<double>(v.tokens) * h;
  std::vector<LayerOp> ops;
  LayerOp tokens;
  tokens.name = "embed.tokens";
  tokens.op_class = pb::OP_CLASS_EMBEDDING;
  tokens.shape = {v.tokens, h};
  // A lookup has no arithmetic; backward scatter-adds each token's gradient into its row.
  tokens.backward_flops = elements;
  // Megatron's vocab-parallel embedding: each TP rank holds ceil(V / tp) rows (the vocabulary
  // is padded), looks up the tokens it owns, and the partial results are all-reduced.
  tokens.parameters = static_cast<double>(detail::ceil_div(spec.vocab_size(), ctx.tp)) * h;
  tokens.forward_bytes_read = elements * ctx.param_bytes;
  tokens.forward_bytes_written = elements * ctx.activation_bytes;
  dense_table_gradient(tokens, ctx);
  tokens.tp_comm_bytes = ctx.tp > 1 ? elements * ctx.activation_bytes : 0;
  ops.push_back(tokens);
  if (spec.position_embedding() == pb::POSITION_EMBEDDING_LEARNED) {
    LayerOp positions;
    positions.name = "embed.positions";
    positions.op_class = pb::OP_CLASS_EMBEDDING;
    positions.shape = {v.tokens, h};
    positions.forward_flops = elements;   // added to the token embeddings
    positions.backward_flops = elements;  // scatter-add into the table
    positions.parameters = static_cast<double>(spec.max_seq_len()) * h;  // not split by TP
    positions.forward_bytes_read = elements * (ctx.param_bytes + ctx.activation_bytes);
    positions.forward_bytes_written = elements * ctx.activation_bytes;
    dense_table_gradient(positions, ctx);
    ops.push_back(positions);
  }
  if (spec.hidden_dropout() > 0) {
    const int64_t n = v.sp_tokens * h;
    ops.push_back(detail::pointwise("embed.dropout", pb::OP_CLASS_ELEMENTWISE, n, 1,
                                    detail::kLinearBackwardFactor, 1,
                                    static_cast<double>(n) * detail::kDropoutMaskBytes, ctx));
  }
  return ops;
}

std::vector<LayerOp> head_ops(const View& v) {
  const auto& spec = v.spec;
  const auto& ctx = v.ctx;
  const int64_t h = spec.hidden_size();
  const int64_t vocab_local = detail::ceil_div(spec.vocab_size(), ctx.tp);  // column parallel
  std::vector<LayerOp> ops;
  ops.push_back(detail::norm("head.norm", spec.norm(), v.sp_tokens, h, ctx));
  LayerOp lm = detail::gemm("head.lm", v.tokens, vocab_local, h, false,
                            static_cast<double>(v.sp_tokens) * h * ctx.activation_bytes, ctx);
  // Tied: the weight is embed.tokens' (read here, counted there).
  if (spec.tied_embeddings()) lm.parameters = 0;
  ops.push_back(lm);
  const int64_t logits = v.tokens * vocab_local;
  if (spec.final_logit_softcapping() > 0) {  // cap * tanh(logits / cap), its output kept
    ops.push_back(detail::pointwise("head.softcap", pb::OP_CLASS_ELEMENTWISE, logits,
                                    detail::kSoftcapFlopsPerElement, detail::kLinearBackwardFactor,
                                    1, static_cast<double>(logits) * ctx.activation_bytes, ctx));
  }
  LayerOp loss = detail::pointwise("head.loss", pb::OP_CLASS_SOFTMAX_LOSS, logits,
                                   detail::kSoftmaxLossFlopsPerElement, 0, 1,
                                   static_cast<double>(logits) * detail::kLossLogitBytes, ctx);
  // Backward: softmax minus one-hot, scaled by the loss gradient: 2 FLOPs per logit.
  loss.backward_flops = 2.0 * static_cast<double>(logits);
  loss.forward_bytes_written = static_cast<double>(v.tokens) * 4;  // fp32 loss per token
  loss.tp_comm_bytes = ctx.tp > 1 ? static_cast<double>(v.tokens) * 3 * 4 : 0;
  ops.push_back(loss);
  return ops;
}

}  // namespace

std::string shard_problem(const pb::ModelSpec& spec, const ShardContext& ctx) {
  if (auto p = degree_problem(ctx); !p.empty()) return p;
  if (auto p = divides("num_attention_heads", spec.num_attention_heads(), "tp", ctx.tp);
      !p.empty()) {
    return p;
  }
  if (spec.num_kv_heads() % ctx.tp != 0 && ctx.tp % spec.num_kv_heads() != 0) {
    return "num_kv_heads (" + std::to_string(spec.num_kv_heads()) + ") and tp (" +
           std::to_string(ctx.tp) + ") must divide one another";
  }
  if (ctx.sequence_parallel) {
    const int64_t tokens = ctx.micro_batch * (ctx.seq_len / ctx.cp);
    if (auto p = divides("micro_batch * seq_len / cp", tokens, "tp", ctx.tp); !p.empty()) return p;
  }
  return ffn_problem(spec, ctx);
}

bool is_moe_layer(const pb::ModelSpec& spec, int64_t layer) {
  return spec.has_moe() && layer >= spec.moe().first_dense_layers();
}

bool is_local_attention_layer(const pb::ModelSpec& spec, int64_t layer) {
  const int64_t period = spec.sliding_window_pattern();
  return spec.sliding_window() > 0 && layer >= spec.sliding_window_from_layer() &&
         (period == 0 || (layer + 1) % period != 0);
}

std::vector<LayerOp> layer_ops(const pb::ModelSpec& spec, LayerPart part, int64_t layer,
                               const ShardContext& ctx) {
  const std::string problem = shard_problem(spec, ctx);
  ORRERY_CHECK(problem.empty(),
               "layer_ops of " + spec.name() + " with a plan that does not fit: " + problem);
  View v = detail::make_view(spec, ctx);
  switch (part) {
    case LayerPart::kEmbedding:
      return embedding_ops(v);
    case LayerPart::kHead:
      return head_ops(v);
    case LayerPart::kDecoder:
      break;
  }
  ORRERY_CHECK(layer >= 0 && layer < spec.num_layers(), "decoder layer index out of range");
  if (is_local_attention_layer(spec, layer)) v.window = spec.sliding_window();
  std::vector<LayerOp> ops;
  detail::append_attention(v, ops);
  detail::append_mlp(v, layer, ops);
  return ops;
}

}  // namespace orrery::models
