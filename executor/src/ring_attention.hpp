// Context parallelism's attention: ring attention with causal load balancing, as Megatron-core
// (TransformerEngine's "p2p" context parallelism) runs it and as the lowering prices it
// (plan/src/lower_layer.cpp, ring_attention): the sequence is cut into 2 x cp equal chunks and
// CP rank r holds chunks r and 2 cp - 1 - r, so every rank has the same share of the causal
// triangle. The attention core runs in cp steps; at step t a rank attends its queries to the
// keys and values of CP rank r - t while it passes that block on to rank r + 1 (cp - 1 sends of
// the rank's K and V per layer), and merges the steps' partial results through their log-sum-exp.
// The backward pass runs the ring again: each block travels with the gradients of K and V that
// the ranks it visited added (cp - 1 sends of K, V, dK and dV: twice the forward's bytes), in the
// reverse direction, so that it ends on the rank that owns it.
//
// Each step's kernel is timed as the lowering's node "attn.core.ring<t>" and each transfer as
// "attn.core.ring<t>.send" / ".recv" (op_trace.hpp), forward, backward and recomputed alike.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "process_group.hpp"

namespace orrery::executor {

// The sequence positions CP rank `rank` of `cp` holds, in order: chunks rank and 2 cp - 1 - rank
// of a sequence of `seq_len` tokens cut into 2 cp equal chunks ([seq_len / cp] int64). cp 1: all.
torch::Tensor cp_positions(int64_t seq_len, int64_t cp, int64_t rank);

// This rank's place in the CP ring and the attention variant the model asks for.
struct RingAttention {
  GroupPtr ring;  // the CP group (its rank i is CP rank i)
  int64_t seq_len = 0;
  double scale = 1.0;
  int64_t window = 0;                // sliding window (attention_math.hpp); 0: causal only
  double softcap = 0;                // Gemma 2's logit soft-cap; 0: none
  std::vector<double> alibi_slopes;  // ALiBi, one slope per local head; empty: none
  int64_t layer = 0;                 // for the trace names
};

// softmax(q k^T scale + bias, causal by global position) v over the whole ring, for this rank's
// queries q [b, heads, s / cp, d] and its own keys and values k, v [b, kv_heads, s / cp, d] (GQA:
// each KV head serves heads / kv_heads consecutive query heads). Returns [b, heads, s / cp, d] in
// q's type. The kernels compute in fp32 whatever the inputs' type (under bf16 the blocks travel
// as bf16, as the lowering's bytes say).
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const RingAttention& ring);

}  // namespace orrery::executor
