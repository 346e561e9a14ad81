// Private builders shared by the layer_ops_*.cpp files: one function per kind of op, so every
// op counts FLOPs, bytes, parameters and saved activations the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/models/layer_ops.hpp"

namespace orrery::models::detail {

// FLOPs per element of the memory-bound ops. They barely matter for time (these kernels are
// bandwidth-bound) but keep training_flops_per_token honest. Counted as arithmetic operations:
inline constexpr double kLayerNormFlopsPerElement = 8;  // mean 1, variance 3, normalize 2, affine 2
inline constexpr double kRmsNormFlopsPerElement = 4;    // square+sum 2, scale 1, weight 1
inline constexpr double kRopeFlopsPerElement = 3;       // x*cos + rotate(x)*sin
inline constexpr double kSoftmaxLossFlopsPerElement = 5;  // max, subtract, exp, sum, normalize
// Backward of norms, activations and the loss: twice the forward (the input gradient needs the
// recomputed statistics or derivative plus the chain product; norms also reduce weight grads).
// Residual adds and RoPE: once the forward (a sum at the branch point; the transposed rotation).
inline constexpr double kPointwiseBackwardFactor = 2;
inline constexpr double kLinearBackwardFactor = 1;
// GEMM backward: data gradient (dX = dY W^T) and weight gradient (dW = X^T dY), each as many
// FLOPs as the forward.
inline constexpr double kGemmBackwardFactor = 2;
// Flash-attention backward recomputes P = softmax(QK^T) and runs dV, dP, dQ, dK: five matmuls of
// the size of the forward's two (Dao 2023, FlashAttention-2, section 3.1).
inline constexpr double kAttentionBackwardFactor = 2.5;
// A causal kernel skips the blocks above the diagonal: half of the full QK^T and PV products.
// Counted exactly at 1/2 (the diagonal blocks' waste is the kernel's efficiency, not work).
inline constexpr double kCausalFraction = 0.5;
// Megatron keeps the dropout masks as one byte per element.
inline constexpr double kDropoutMaskBytes = 1;
// tanh soft-capping, cap * tanh(x / cap): divide, tanh, multiply per element forward; backward
// cap' = 1 - tanh^2 times the incoming gradient (square, subtract, multiply).
inline constexpr double kSoftcapFlopsPerElement = 3;
// ALiBi: one add of the head's bias per score (its backward passes the gradient through).
inline constexpr double kAlibiFlopsPerElement = 1;
// Flash-attention keeps one fp32 log-sum-exp per query row and head for its backward.
inline constexpr double kSoftmaxStatBytes = 4;
// Megatron's vocab-parallel cross entropy keeps the logits' softmax in fp32.
inline constexpr double kLossLogitBytes = 4;
// Router probabilities are computed and kept in fp32.
inline constexpr double kRouterProbBytes = 4;

// The rank's view of the micro-batch, derived once per layer_ops call.
struct View {
  const pb::ModelSpec& spec;
  const ShardContext& ctx;
  int64_t tokens = 0;     // micro_batch * seq_len / cp: rows of the GEMMs
  int64_t sp_tokens = 0;  // tokens / tp under sequence parallelism, else tokens: norms, residuals
  int64_t q_heads = 0;    // query heads on this rank
  int64_t kv_heads = 0;   // key/value heads on this rank (replicated when tp > num_kv_heads)
  // Keys each query attends to at most: the sliding window on a local layer, else 0 (the whole
  // causal prefix). Set by layer_ops for a decoder layer.
  int64_t window = 0;
};
View make_view(const pb::ModelSpec& spec, const ShardContext& ctx);

// y[m, n] = x[m, k] W[k, n] (+ b). `saved_bytes`: what backward keeps (usually its input).
LayerOp gemm(std::string name, int64_t m, int64_t n, int64_t k, bool bias, double saved_bytes,
             const ShardContext& ctx);

// A norm over `rows` vectors of `width`; keeps its input.
LayerOp norm(std::string name, pb::Norm kind, int64_t rows, int64_t width, const ShardContext& ctx);

// A memory-bound op over `elements` outputs reading `inputs_per_element` tensors of them.
LayerOp pointwise(std::string name, pb::OpClass op_class, int64_t elements,
                  double flops_per_element, double backward_factor, double inputs_per_element,
                  double saved_bytes, const ShardContext& ctx);

// Residual add (with dropout when the spec has it: one more FLOP and a kept mask per element).
LayerOp residual(std::string name, const View& v);

int64_t ceil_div(int64_t a, int64_t b);

// Attention and FFN halves of a decoder layer (layer_ops_attention.cpp, layer_ops_mlp.cpp).
// With spec.parallel_block the attention half has no residual and its output projection no TP
// reduction: the FFN half sums both outputs (block.sum, which carries the one reduction) and adds
// them to the residual once.
void append_attention(const View& v, std::vector<LayerOp>& ops);
void append_mlp(const View& v, int64_t layer, std::vector<LayerOp>& ops);

}  // namespace orrery::models::detail
