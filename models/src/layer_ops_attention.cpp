// The attention half of a decoder layer: norm, projections (standard with GQA, or MLA's low-rank
// ones), RoPE, the causal flash-attention core, output projection and residual.
//
// Tensor parallelism follows Megatron: q/k/v (and MLA's up-projections) are column parallel by
// heads, the output projection is row parallel and followed by the TP reduction; MLA's
// down-projections are replicated on every TP rank. Saved activations follow Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models"): with flash attention
// Q, K, V and the output are kept, the s^2 softmax and its dropout mask never are; with
// materialized attention they are (append_materialized_core).
#include <utility>

#include "layer_ops_build.hpp"
#include "orrery/models/model_catalog.hpp"

namespace orrery::models::detail {
namespace {

struct HeadDims {
  int64_t qk = 0;    // per-head dimension of queries and keys
  int64_t v = 0;     // per-head dimension of values (and the attention output)
  int64_t rope = 0;  // rotated dimensions per query/key head
};

HeadDims head_dims(const pb::ModelSpec& spec) {
  if (spec.has_mla()) {
    const auto& mla = spec.mla();
    return {mla.qk_nope_head_dim() + mla.qk_rope_head_dim(), mla.v_head_dim(),
            mla.qk_rope_head_dim()};
  }
  const int64_t d = head_dim(spec);
  int64_t rope = 0;
  if (spec.position_embedding() == pb::POSITION_EMBEDDING_ROPE) {
    const double fraction = spec.has_rotary_fraction() ? spec.rotary_fraction() : 1.0;
    rope = static_cast<int64_t>(static_cast<double>(d) * fraction);  // GPT-NeoX truncates too
  }
  return {d, d, rope};
}

// RoPE on `heads` query/key heads of `dims` rotated dimensions each. It keeps nothing: backward
// is the transposed rotation, which needs only the positions.
LayerOp rope(const View& v, int64_t heads, int64_t dims) {
  return pointwise("attn.rope", pb::OP_CLASS_ELEMENTWISE, v.tokens * heads * dims,
                   kRopeFlopsPerElement, kLinearBackwardFactor, 1, 0, v.ctx);
}

// Of the full q x k square, the query-key pairs a causal kernel computes over s tokens, each
// query attending to at most `window` keys (0: all before it). Counted as the continuous triangle,
// 1/2 (the diagonal blocks' waste is the kernel's efficiency, not work); with a window w < s the
// triangle's first w rows plus a band of width w: (s*w - w^2/2) / s^2, which is 1/2 at w = s.
double causal_fraction(int64_t s, int64_t window) {
  if (window <= 0 || window >= s) return kCausalFraction;
  const double sd = static_cast<double>(s), w = static_cast<double>(window);
  return (sd * w - 0.5 * w * w) / (sd * sd);
}

// Elementwise work on each computed score inside a fused kernel, forward and backward (which
// recomputes the scores): ALiBi's bias add (backward passes through) and soft-capping's tanh
// (forward again in the recompute, then its derivative).
std::pair<double, double> score_flops(const pb::ModelSpec& spec) {
  const bool alibi = spec.position_embedding() == pb::POSITION_EMBEDDING_ALIBI;
  const double cap = spec.attn_logit_softcapping() > 0 ? kSoftcapFlopsPerElement : 0.0;
  const double bias = alibi ? kAlibiFlopsPerElement : 0.0;
  return {bias + cap, bias + 2.0 * cap};
}

// softmax(QK^T / sqrt(d)) V, causal, as one flash-attention kernel (FlashAttention-2's
// window_size and softcap arguments, and its ALiBi slopes, skip the blocks outside the window
// and apply the bias and the cap on the tiles in registers: no score ever reaches memory).
LayerOp core(const View& v, const HeadDims& d, int64_t kv_heads) {
  const auto& ctx = v.ctx;
  const double act = ctx.activation_bytes;
  const int64_t q_len = ctx.seq_len / ctx.cp;  // this rank's queries (two balanced chunks)
  const int64_t kv_len = ctx.seq_len;          // every key/value visits it around the CP ring
  const double mb = static_cast<double>(ctx.micro_batch);
  LayerOp op;
  op.name = "attn.core";
  op.op_class = pb::OP_CLASS_ATTENTION;
  op.shape = {ctx.micro_batch, v.q_heads, q_len, kv_len, d.qk};
  // QK^T: 2 * d_qk per query-key pair and head, PV: 2 * d_v; with CP each rank's two chunks see,
  // together, 1/cp of the pairs (the KV ring still passes every block).
  const double pairs = causal_fraction(ctx.seq_len, v.window) * mb *
                       static_cast<double>(v.q_heads) * q_len * static_cast<double>(kv_len);
  const double matmul = 2.0 * pairs * static_cast<double>(d.qk + d.v);
  const auto [extra_fwd, extra_bwd] = score_flops(v.spec);
  op.forward_flops = matmul + pairs * extra_fwd;
  op.backward_flops = kAttentionBackwardFactor * matmul + pairs * extra_bwd;
  const double t = static_cast<double>(v.tokens);
  const double q_bytes = t * v.q_heads * d.qk * act;
  const double kv_local_bytes = t * kv_heads * (d.qk + d.v) * act;
  op.forward_bytes_read = q_bytes + mb * kv_len * kv_heads * (d.qk + d.v) * act;
  op.forward_bytes_written = t * v.q_heads * d.v * act;
  // Q, K, V (Korthikanti: "Q and K 4sbh", "V 2sbh") and the fp32 log-sum-exp per query row; the
  // output is kept as attn.out's input.
  const double softmax_stats = t * v.q_heads * kSoftmaxStatBytes;
  op.saved_activation_bytes = q_bytes + kv_local_bytes + softmax_stats;
  op.selective_recompute = true;
  op.selective_recompute_bytes = softmax_stats;
  op.cp_kv_bytes = ctx.cp > 1 ? kv_local_bytes : 0;
  op.attention_kernel = ctx.attention_kernel;
  return op;
}

// Megatron-LM's attention before FlashAttention: QK^T as a batched GEMM over the full square (the
// causal mask is applied afterwards), a fused scale-mask-softmax, attention dropout, and PV as a
// batched GEMM. Korthikanti et al.'s "5as^2b" is what it stores: the softmax output (2 bytes), the
// dropout mask (1 byte) and the dropout output (2 bytes) per score; selective recomputation drops
// exactly those and recomputes the three ops. A sliding window changes none of it: the scores are
// computed and stored over the full square and the window is part of the mask (Megatron's and
// Hugging Face's eager attention). ALiBi is added in the QK^T GEMM's epilogue (BLOOM's baddbmm:
// the bias tensor as the GEMM's C operand); soft-capping is a kernel of its own over the scores,
// keeping its output for the derivative (Gemma 2's eager attention).
void append_materialized_core(const View& v, const HeadDims& d, int64_t kv_heads,
                              std::vector<LayerOp>& ops) {
  const auto& ctx = v.ctx;
  const double act = ctx.activation_bytes;
  const int64_t s = ctx.seq_len;
  const double mb = static_cast<double>(ctx.micro_batch);
  const double scores =
      mb * static_cast<double>(v.q_heads) * static_cast<double>(s) * static_cast<double>(s);
  const double t = static_cast<double>(v.tokens);
  const double q_bytes = t * v.q_heads * d.qk * act;
  const double k_bytes = t * kv_heads * d.qk * act;
  const double v_bytes = t * kv_heads * d.v * act;
  const bool dropout = v.spec.hidden_dropout() > 0;

  LayerOp qk;
  qk.name = "attn.scores";
  qk.op_class = pb::OP_CLASS_GEMM;
  qk.shape = {ctx.micro_batch * v.q_heads * s, s, d.qk};
  qk.forward_flops = 2.0 * scores * static_cast<double>(d.qk);
  qk.backward_flops = 2.0 * qk.forward_flops;  // dQ and dK
  qk.forward_bytes_read = q_bytes + k_bytes;
  qk.forward_bytes_written = scores * act;
  qk.saved_activation_bytes = q_bytes + k_bytes;  // Korthikanti's "Q and K: 4sbh"
  qk.selective_recompute = true;
  if (v.spec.position_embedding() == pb::POSITION_EMBEDDING_ALIBI) {
    qk.forward_flops += scores * kAlibiFlopsPerElement;
    qk.forward_bytes_read += mb * v.q_heads * static_cast<double>(s) * act;  // [b*h, 1, s]
  }
  ops.push_back(qk);
  if (v.spec.attn_logit_softcapping() > 0) {
    LayerOp cap = pointwise("attn.softcap", pb::OP_CLASS_ELEMENTWISE, static_cast<int64_t>(scores),
                            kSoftcapFlopsPerElement, kLinearBackwardFactor, 1, scores * act, ctx);
    cap.selective_recompute = true;
    cap.selective_recompute_bytes = cap.saved_activation_bytes;
    ops.push_back(cap);
  }

  // Scale, causal mask and softmax in one kernel: read the scores, write the probabilities.
  LayerOp softmax =
      pointwise("attn.softmax", pb::OP_CLASS_ELEMENTWISE, static_cast<int64_t>(scores),
                kSoftmaxLossFlopsPerElement, kLinearBackwardFactor, 1, scores * act, ctx);
  softmax.selective_recompute = true;
  softmax.selective_recompute_bytes = scores * act;
  ops.push_back(softmax);

  if (dropout) {
    LayerOp drop = pointwise("attn.dropout", pb::OP_CLASS_ELEMENTWISE, static_cast<int64_t>(scores),
                             1, kLinearBackwardFactor, 1, scores * (kDropoutMaskBytes + act), ctx);
    drop.forward_bytes_written += scores * kDropoutMaskBytes;
    drop.selective_recompute = true;
    drop.selective_recompute_bytes = drop.saved_activation_bytes;
    ops.push_back(drop);
  }

  LayerOp pv;
  pv.name = "attn.context";
  pv.op_class = pb::OP_CLASS_GEMM;
  pv.shape = {ctx.micro_batch * v.q_heads * s, d.v, s};
  pv.forward_flops = 2.0 * scores * static_cast<double>(d.v);
  pv.backward_flops = 2.0 * pv.forward_flops;  // dP and dV
  pv.forward_bytes_read = scores * act + v_bytes;
  pv.forward_bytes_written = t * v.q_heads * d.v * act;
  pv.saved_activation_bytes = v_bytes;  // "V: 2sbh"; the probabilities are counted above
  pv.selective_recompute = true;
  ops.push_back(pv);
}

void append_core(const View& v, const HeadDims& d, int64_t kv_heads, std::vector<LayerOp>& ops) {
  if (v.ctx.flash_attention) {
    ops.push_back(core(v, d, kv_heads));
  } else {
    append_materialized_core(v, d, kv_heads, ops);
  }
}

LayerOp out_projection(const View& v, const HeadDims& d) {
  const double act = v.ctx.activation_bytes;
  const int64_t k = v.q_heads * d.v;
  LayerOp op = gemm("attn.out", v.tokens, v.spec.hidden_size(), k, v.spec.linear_bias(),
                    static_cast<double>(v.tokens) * k * act, v.ctx);
  // A parallel block reduces attention and MLP outputs together, after the MLP (block.sum).
  if (v.ctx.tp > 1 && !v.spec.parallel_block())
    op.tp_comm_bytes = static_cast<double>(v.tokens) * v.spec.hidden_size() * act;
  return op;
}

// Grouped-query attention with one fused q/k/v projection.
void append_standard(const View& v, const HeadDims& d, std::vector<LayerOp>& ops) {
  const auto& spec = v.spec;
  const double act = v.ctx.activation_bytes;
  const int64_t h = spec.hidden_size();
  const bool bias = spec.linear_bias() || spec.qkv_bias();
  // Keeps its input; under SP the sequence-sharded copy, gathered again in backward.
  ops.push_back(gemm("attn.qkv", v.tokens, (v.q_heads + 2 * v.kv_heads) * d.qk, h, bias,
                     static_cast<double>(v.sp_tokens) * h * act, v.ctx));
  if (spec.qk_norm()) {  // Qwen3: a per-head norm of queries and keys, one weight each
    ops.push_back(norm("attn.q_norm", spec.norm(), v.tokens * v.q_heads, d.qk, v.ctx));
    ops.push_back(norm("attn.k_norm", spec.norm(), v.tokens * v.kv_heads, d.qk, v.ctx));
  }
  if (d.rope > 0) ops.push_back(rope(v, v.q_heads + v.kv_heads, d.rope));
  append_core(v, d, v.kv_heads, ops);
}

// DeepSeek multi-head latent attention: queries through a q_lora_rank bottleneck, keys and
// values through a shared kv_lora_rank latent plus one shared rotary key of qk_rope_head_dim.
void append_mla(const View& v, const HeadDims& d, std::vector<LayerOp>& ops) {
  const auto& spec = v.spec;
  const auto& mla = spec.mla();
  const double act = v.ctx.activation_bytes;
  const double t = static_cast<double>(v.tokens);
  const int64_t h = spec.hidden_size();
  const bool bias = spec.linear_bias();
  const double input_bytes = static_cast<double>(v.sp_tokens) * h * act;
  if (mla.q_lora_rank() > 0) {
    ops.push_back(gemm("attn.q_down", v.tokens, mla.q_lora_rank(), h, bias, input_bytes, v.ctx));
    ops.push_back(norm("attn.q_norm", spec.norm(), v.tokens, mla.q_lora_rank(), v.ctx));
    ops.push_back(gemm("attn.q_up", v.tokens, v.q_heads * d.qk, mla.q_lora_rank(), bias,
                       t * mla.q_lora_rank() * act, v.ctx));
  } else {
    ops.push_back(gemm("attn.q", v.tokens, v.q_heads * d.qk, h, bias, input_bytes, v.ctx));
  }
  // Same input tensor as the query projection: kept once, there.
  ops.push_back(gemm("attn.kv_down", v.tokens, mla.kv_lora_rank() + mla.qk_rope_head_dim(), h, bias,
                     0, v.ctx));
  ops.push_back(norm("attn.kv_norm", spec.norm(), v.tokens, mla.kv_lora_rank(), v.ctx));
  ops.push_back(gemm("attn.kv_up", v.tokens, v.q_heads * (mla.qk_nope_head_dim() + d.v),
                     mla.kv_lora_rank(), bias, t * mla.kv_lora_rank() * act, v.ctx));
  // Every query head's rotary part plus the one rotary key shared by all heads.
  ops.push_back(rope(v, v.q_heads + 1, d.rope));
  append_core(v, d, v.q_heads, ops);
}

}  // namespace

void append_attention(const View& v, std::vector<LayerOp>& ops) {
  const HeadDims d = head_dims(v.spec);
  ops.push_back(norm("attn.norm", v.spec.norm(), v.sp_tokens, v.spec.hidden_size(), v.ctx));
  if (v.spec.has_mla()) {
    append_mla(v, d, ops);
  } else {
    append_standard(v, d, ops);
  }
  ops.push_back(out_projection(v, d));
  if (v.spec.post_block_norm()) {  // on the reduced (under SP: scattered) output
    ops.push_back(norm("attn.post_norm", v.spec.norm(), v.sp_tokens, v.spec.hidden_size(), v.ctx));
  }
  if (!v.spec.parallel_block()) ops.push_back(residual("attn.residual", v));
}

}  // namespace orrery::models::detail
