#include "orrery/plan/op_sac.hpp"
#include "orrery/models/activation.hpp"

#include <string>

namespace orrery::plan {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The widths (output columns on this rank) of the matmuls a GEMM op stands for, in call order.
std::vector<double> matmul_widths(const models::LayerOp& op, const pb::ModelSpec& model) {
  const double n = op.shape.size() >= 2 ? static_cast<double>(op.shape[1]) : 0;
  if (op.name == "attn.qkv") {
    const double heads = static_cast<double>(model.num_attention_heads());
    const double kv = static_cast<double>(model.num_kv_heads());
    const double per_head = n / (heads + 2 * kv);
    return {heads * per_head, kv * per_head, kv * per_head};
  }
  if (op.name == "mlp.up" && models::gated_activation(model.activation())) return {n / 2, n / 2};
  return {n};
}

}  // namespace

bool counted_matmul(const models::LayerOp& op) {
  return op.op_class == pb::OP_CLASS_GEMM && !starts_with(op.name, "moe.") &&
         op.name != "attn.scores" && op.name != "attn.context" && op.shape.size() >= 2;
}

bool in_decoder_layer(const models::LayerOp& op) {
  return !starts_with(op.name, "embed.") && !starts_with(op.name, "head.");
}

std::vector<OpSacSplit> op_sac_split(const std::vector<models::LayerOp>& layer,
                                     const pb::ModelSpec& model, double act_bytes) {
  std::vector<OpSacSplit> out;
  int64_t matmuls = 0;
  for (const auto& op : layer) {
    OpSacSplit s;
    if (op.name == "attn.core") {
      // The fused kernel's outputs: O and its softmax statistics (what selective recomputation
      // would drop of its saved tensors). A materialized attention's scores, softmax and
      // context are batched matmuls and pointwise ops, none on the save list: re-run.
      s.kept_bytes = op.forward_bytes_written + op.selective_recompute_bytes;
    } else if (counted_matmul(op)) {
      const double rows = static_cast<double>(op.shape[0]);
      double width = 0, recomputed = 0;
      for (const double w : matmul_widths(op, model)) {
        width += w;
        if (keeps_matmul(matmuls++)) {
          s.kept_bytes += rows * w * act_bytes;
        } else {
          recomputed += w;
        }
      }
      s.recompute_fraction = width > 0 ? recomputed / width : 0;
    } else {
      s.recompute_fraction = 1;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace orrery::plan
