// Megatron's tensor-parallel region boundaries as autograd functions, and the data-parallel and
// global-norm steps on gradients. Each takes a null group as "size 1".
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "process_group.hpp"

namespace orrery::executor {

// One trainable tensor and how it is split over the TP group.
struct ShardedParam {
  std::string name;
  torch::Tensor tensor;
  int64_t shard_dim = -1;  // the dimension split over TP ranks; -1: replicated
  // Replicated, but used on this rank's sequence shard only (SP: norms, row-parallel biases), or
  // its gradient is a partial sum on each TP rank (MoE router, expert down biases): its gradient
  // is summed over the TP group.
  bool sequence_parallel = false;
  // The last stage's copy of a tied embedding matrix (pp > 1): kept equal to the first stage's by
  // summing their gradients; counted once in the gradient norm and saved from the first stage.
  bool pipeline_copy = false;
  // A routed expert's weight (MoE): reduced over the expert-data-parallel group, not dp, and
  // split over the EP group (model_moe.hpp).
  bool expert = false;
};

// Each boundary takes the trace names of the collectives it runs (see op_trace.hpp): `name` in
// forward, `grad_name` in backward; empty: not timed.

// Megatron "f": identity forward, all-reduce of the gradient backward (before column-parallel).
torch::Tensor copy_to_tp_region(const torch::Tensor& x, const GroupPtr& tp,
                                const std::string& grad_name);
// Megatron "g": all-reduce forward, identity backward (after row-parallel).
torch::Tensor reduce_from_tp_region(const torch::Tensor& x, const GroupPtr& tp,
                                    const std::string& name);

// Megatron sequence parallelism over the TP group, along dim 1 (sequence) of [batch, seq, hidden].
// Gloo 1.13 has no reduce-scatter: it runs as an all-reduce followed by keeping the rank's slice.
// All-gather forward; backward reduce-scatter (`reduce_grad`: before column-parallel GEMMs, whose
// input gradients are partial sums) or keep the slice.
torch::Tensor gather_from_sequence_region(const torch::Tensor& x, const GroupPtr& tp,
                                          bool reduce_grad, const std::string& name,
                                          const std::string& grad_name);
// Reduce-scatter forward, all-gather backward (after row-parallel GEMMs and the vocabulary-
// parallel embedding).
torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, const GroupPtr& tp,
                                                const std::string& name,
                                                const std::string& grad_name);

// Mean next-token cross entropy from vocabulary-parallel logits ([..., vocab / tp], this rank's
// slice starting at `vocab_start`), exact. Megatron issues three small all-reduces; this issues
// two, the maximum and then its two sums stacked, timed as `name`.max.all_reduce and
// `name`.sum.all_reduce (`name` empty: untimed). A null group: the whole vocabulary is local.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits,
                                           const torch::Tensor& targets, const GroupPtr& tp,
                                           int64_t vocab_start, const std::string& name);

// Sums over `tp` the gradients of the parameters marked sequence_parallel.
void all_reduce_sequence_parallel_gradients(const std::vector<ShardedParam>& params,
                                            const GroupPtr& tp);

// Data-parallel gradient reduction (buckets by the lowering's rule, ZeRO, FSDP) is in
// parallel_sharding.hpp.

// Global L2 norm of the gradients (TP shards summed over `tp`, replicated tensors counted once,
// pipeline stages summed over `pp`, routed experts summed over `ep`), then torch's
// clip_grad_norm_ rule: scale by max_norm / (norm + 1e-6) when that is below 1. max_norm <= 0: no
// clipping. Returns the norm before clipping.
double clip_gradients(const std::vector<ShardedParam>& params, const GroupPtr& tp,
                      const GroupPtr& pp, double max_norm, const GroupPtr& ep = {});

// The full tensor of a TP-sharded parameter (list-form all-gather over `tp`, concatenated).
torch::Tensor gather_full(const ShardedParam& param, const GroupPtr& tp);

}  // namespace orrery::executor
