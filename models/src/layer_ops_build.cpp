// The op builders: how a GEMM, a norm and a memory-bound op count FLOPs, bytes and parameters.
#include <cmath>

#include "layer_ops_build.hpp"

namespace orrery::models::detail {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

View make_view(const pb::ModelSpec& spec, const ShardContext& ctx) {
  View v{spec, ctx};
  v.tokens = ctx.micro_batch * (ctx.seq_len / ctx.cp);
  v.sp_tokens = ctx.sequence_parallel ? v.tokens / ctx.tp : v.tokens;
  v.q_heads = spec.num_attention_heads() / ctx.tp;
  // Fewer KV heads than TP ranks: each rank keeps a copy of the one its query heads use.
  v.kv_heads = spec.num_kv_heads() >= ctx.tp ? spec.num_kv_heads() / ctx.tp : 1;
  return v;
}

LayerOp gemm(std::string name, int64_t m, int64_t n, int64_t k, bool bias, double saved_bytes,
             const ShardContext& ctx) {
  LayerOp op;
  op.name = std::move(name);
  op.op_class = pb::OP_CLASS_GEMM;
  op.shape = {m, n, k};
  const double mnk2 =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  // The bias add in forward and the column sums of dY for its gradient.
  const double bias_flops = bias ? static_cast<double>(m) * static_cast<double>(n) : 0.0;
  op.forward_flops = mnk2 + bias_flops;
  op.backward_flops = kGemmBackwardFactor * mnk2 + bias_flops;
  op.parameters = static_cast<double>(k) * n + (bias ? n : 0);
  op.forward_bytes_read =
      static_cast<double>(m) * k * ctx.activation_bytes + op.parameters * ctx.param_bytes;
  op.forward_bytes_written = static_cast<double>(m) * n * ctx.activation_bytes;
  op.saved_activation_bytes = saved_bytes;
  return op;
}

LayerOp norm(std::string name, pb::Norm kind, int64_t rows, int64_t width,
             const ShardContext& ctx) {
  const bool layer_norm = kind == pb::NORM_LAYERNORM;
  const double elements = static_cast<double>(rows) * width;
  LayerOp op;
  op.name = std::move(name);
  op.op_class = pb::OP_CLASS_NORM;
  op.shape = {rows * width};
  op.forward_flops = elements * (layer_norm ? kLayerNormFlopsPerElement : kRmsNormFlopsPerElement);
  op.backward_flops = kPointwiseBackwardFactor * op.forward_flops;
  op.parameters = layer_norm ? 2.0 * width : static_cast<double>(width);  // LayerNorm: + bias
  op.forward_bytes_read = elements * ctx.activation_bytes + op.parameters * ctx.param_bytes;
  op.forward_bytes_written = elements * ctx.activation_bytes;
  // The input (Korthikanti et al.: "LayerNorm input 2sbh"); the per-row statistics are a
  // fraction of a percent and left out so the totals match the paper's formula.
  op.saved_activation_bytes = elements * ctx.activation_bytes;
  return op;
}

LayerOp pointwise(std::string name, pb::OpClass op_class, int64_t elements,
                  double flops_per_element, double backward_factor, double inputs_per_element,
                  double saved_bytes, const ShardContext& ctx) {
  LayerOp op;
  op.name = std::move(name);
  op.op_class = op_class;
  op.shape = {elements};
  op.forward_flops = static_cast<double>(elements) * flops_per_element;
  op.backward_flops = backward_factor * op.forward_flops;
  op.forward_bytes_read = static_cast<double>(elements) * inputs_per_element * ctx.activation_bytes;
  op.forward_bytes_written = static_cast<double>(elements) * ctx.activation_bytes;
  op.saved_activation_bytes = saved_bytes;
  return op;
}

LayerOp residual(std::string name, const View& v) {
  const bool dropout = v.spec.hidden_dropout() > 0;
  const int64_t elements = v.sp_tokens * v.spec.hidden_size();
  // Megatron's fused bias-dropout-add: one add, plus one multiply by the mask with dropout,
  // whose 1-byte mask backward needs (Korthikanti et al.: "dropout mask sbh").
  return pointwise(std::move(name), pb::OP_CLASS_ELEMENTWISE, elements, dropout ? 2 : 1,
                   kLinearBackwardFactor, 2,
                   dropout ? static_cast<double>(elements) * kDropoutMaskBytes : 0.0, v.ctx);
}

}  // namespace orrery::models::detail
