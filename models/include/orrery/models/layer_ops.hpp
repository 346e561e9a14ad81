// The per-layer op decomposition: the single source of truth for what a layer computes, used by
// both the simulator (costs) and the executor (what to run and time). Every op carries its kind,
// shapes, forward and backward FLOPs, bytes moved, parameters and saved-activation bytes, for one
// rank's shard of one micro-batch under the given parallel degrees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::models {

// How one rank sees a micro-batch: its slice of the parallel dimensions.
struct ShardContext {
  int64_t micro_batch = 1;  // sequences per micro-batch
  int64_t seq_len = 2048;   // full sequence length (CP splits it)
  int64_t tp = 1;
  bool sequence_parallel = false;  // Megatron SP: norms/dropout on seq_len / tp tokens
  int64_t cp = 1;                  // context parallel: this rank holds seq_len / cp tokens
  int64_t ep = 1;                  // expert parallel: this rank holds num_experts / ep experts
  // MoE parallel folding (plan parallel.etp): the routed experts' own tensor-parallel degree;
  // each rank routes its own tokens (sp_tokens) and the experts' etp group gathers what the
  // all-to-all brought before the experts and reduce-scatters after. 0: no folding (the experts
  // are split by tp and routed from the tp ranks' common tokens).
  int64_t etp = 0;
  // Copies of a token the dispatch (and combine) all-to-all carries when fewer than top_k: the
  // nodes it reaches, when its dispatcher sends a token once per node and forwards it inside the
  // node over NVLink (DeepEP's inter-node kernels; plan::dispatch_copies: the bound of
  // group-limited routing, or the expected count under uniform routing). 0: top_k copies.
  double ep_dispatch_copies = 0;
  double activation_bytes = 2;  // bytes per activation element (bf16: 2)
  double param_bytes = 2;       // bytes per parameter element as the kernels read it
  // MoE: tokens routed to this rank's experts over the mean (>= 1, from the plan).
  double moe_imbalance = 1.0;
  // MoE token dropping (plan moe_capacity_factor): an expert takes at most this many times its
  // mean share of the pairs (0: no capacity). Padded (moe_pad_to_capacity): exactly that many.
  // Scales the routed experts' work (min(imbalance, factor), or factor padded) and the dispatch,
  // etp and combine bytes (min(1, factor), or factor padded): moe_pairs_scale, moe_traffic_scale.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // Fused flash attention (one attn.core op) or materialized scores (attn.scores, attn.softmax,
  // attn.dropout, attn.context), see plan.proto's AttentionKernel.
  bool flash_attention = true;
  // With flash_attention: the plan's kernel (flash, flash_2, flash_3), carried on attn.core
  // (LayerOp.attention_kernel) for the cost model to price; unspecified prices as flash.
  pb::AttentionKernel attention_kernel = pb::ATTENTION_KERNEL_UNSPECIFIED;
};

enum class LayerPart { kEmbedding, kDecoder, kHead };

struct LayerOp {
  std::string name;  // stable: "attn.qkv", "attn.core", "mlp.up", "moe.experts", "head.loss"
  pb::OpClass op_class = pb::OP_CLASS_UNSPECIFIED;
  // GEMM: {m, n, k} with batch folded into m; attention: {batch, heads, q_len, kv_len, head_dim};
  // others: {elements}.
  std::vector<int64_t> shape;
  double forward_flops = 0;
  double backward_flops = 0;  // data + weight gradients
  double forward_bytes_read = 0;
  double forward_bytes_written = 0;
  // Backward moves twice the forward bytes, plus these: an embedding's backward materializes its
  // whole table's gradient (zeroed, then the looked-up rows' gradients added in) and accumulates
  // it into the parameter's fp32 gradient, a pass over the table however few tokens used it.
  double backward_extra_bytes_read = 0;
  double backward_extra_bytes_written = 0;
  double parameters = 0;              // elements of this rank's shard of the op's weights
  double saved_activation_bytes = 0;  // kept from forward for backward (no recomputation)
  // Part of the attention core that selective recomputation drops and recomputes.
  bool selective_recompute = false;
  // Of saved_activation_bytes, what selective recomputation drops (the op's inputs stay, they are
  // what it is recomputed from). With flash attention only the softmax statistics: the s^2
  // terms of Korthikanti et al. are never stored.
  double selective_recompute_bytes = 0;
  // The op's output feeds a TP collective in forward (Megatron "g"/"g-bar" points): the lowering
  // inserts all-reduce (or reduce-scatter/all-gather with SP) of this many bytes after it.
  // Under SP each such point is a reduce-scatter after the op plus an all-gather of the same
  // size before the next column-parallel GEMM (attn.qkv / attn.q_down, mlp.up / moe.router,
  // head.lm). head.loss carries its three fp32 words per token (max, sum of exp, target logit),
  // all-reduced under SP too, in two calls (the lowering: the max, then the two sums stacked).
  double tp_comm_bytes = 0;
  // MoE dispatch (on moe.router) and combine (on moe.experts.down) all-to-all volume per rank
  // (bytes sent to other ranks), when ep > 1.
  double ep_alltoall_bytes = 0;
  // MoE folding with etp > 1: the gathered bytes (etp ranks' dispatched tokens) of the all-gather
  // in the experts' etp group after the dispatch (on the router) and of the reduce-scatter before
  // the combine (on the routed experts' down projection).
  double etp_comm_bytes = 0;
  // CP: KV bytes passed around the ring per step, when cp > 1.
  double cp_kv_bytes = 0;
  // The precision the op runs in when it differs from the plan's ("fp8": set by the plan's fp8
  // recipe, plan/fp8.hpp); empty: the plan's compute precision.
  std::string dtype;
  // attn.core: the fused kernel it runs as (ShardContext.attention_kernel); every other op:
  // unspecified. The compute cost model prices flash_2 and flash_3 at their published efficiency.
  pb::AttentionKernel attention_kernel = pb::ATTENTION_KERNEL_UNSPECIFIED;
};

// Why `ctx` cannot shard `spec` (heads, KV heads, FFN widths, experts or the sequence not
// divisible by the degrees), or empty when it can. layer_ops requires an empty answer; the
// planner uses it as a validity rule.
std::string shard_problem(const pb::ModelSpec& spec, const ShardContext& ctx);

// The busiest rank's routed token-expert pairs over the mean (moe_imbalance, bounded or set by
// the capacity), and the all-to-all's rows over the mean (1, less what a capacity below the mean
// drops, or the capacity padded).
double moe_pairs_scale(const ShardContext& ctx);
double moe_traffic_scale(const ShardContext& ctx);

// Whether decoder layer `layer` has an MoE FFN (false for dense models and the first
// moe.first_dense_layers layers).
bool is_moe_layer(const pb::ModelSpec& spec, int64_t layer);

// Whether decoder layer `layer` attends within spec.sliding_window (a local layer) rather than to
// the whole causal prefix: every layer when sliding_window_pattern is 0, else all but every
// pattern-th one (Gemma 2: odd layers global; Gemma 3: layers 5, 11, ... global).
bool is_local_attention_layer(const pb::ModelSpec& spec, int64_t layer);

// Ops of decoder layer `layer` (0-based; decides dense vs MoE FFN and local vs global attention),
// embedding, or LM head + loss.
std::vector<LayerOp> layer_ops(const pb::ModelSpec& spec, LayerPart part, int64_t layer,
                               const ShardContext& ctx);

// Whole-model figures, all from the op decomposition at tp = cp = ep = 1.
struct ModelStats {
  double parameters = 0;         // all weights, embeddings included (tied counted once)
  double active_parameters = 0;  // touched per token (MoE: top-k + shared experts)
  // Token embedding, learned position table and the untied output matrix.
  double embedding_parameters = 0;
  // Training FLOPs per token at sequence length seq_len: forward + backward, no recomputation,
  // causal attention counted as the kernel computes it (half of the full square).
  double training_flops_per_token = 0;
  // The usual approximation, for cross-checking: 6 * (active - embedding parameters)
  // + 6 * vocab_size * hidden_size (the output GEMM, counted also when tied; the embedding lookup
  // has no FLOPs) + 12 * layers * seq_len * attention width (Kaplan/Chinchilla/Megatron: QK^T and
  // PV over the full square, backward 2x). Attention width: heads * head_dim, or
  // heads * (qk_head_dim + v_head_dim) / 2 with MLA.
  double approx_flops_per_token = 0;
};
ModelStats model_stats(const pb::ModelSpec& spec, int64_t seq_len);

}  // namespace orrery::models
