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
  // Replicated, but used on this rank's sequence shard only (SP: norms, row-parallel biases): its
  // gradient is summed over the TP group.
  bool sequence_parallel = false;
  // The last stage's copy of a tied embedding matrix (pp > 1): kept equal to the first stage's by
  // summing their gradients; counted once in the gradient norm and saved from the first stage.
  bool pipeline_copy = false;
};

// Megatron "f": identity forward, all-reduce of the gradient backward (before column-parallel).
torch::Tensor copy_to_tp_region(const torch::Tensor& x, const GroupPtr& tp);
// Megatron "g": all-reduce forward, identity backward (after row-parallel).
torch::Tensor reduce_from_tp_region(const torch::Tensor& x, const GroupPtr& tp);

// Megatron sequence parallelism over the TP group, along dim 1 (sequence) of [batch, seq, hidden].
// Gloo 1.13 has no reduce-scatter: it runs as an all-reduce followed by keeping the rank's slice.
// Split: keep this rank's slice forward, all-gather backward (after the embeddings).
torch::Tensor scatter_to_sequence_region(const torch::Tensor& x, const GroupPtr& tp);
// All-gather forward; backward reduce-scatter (`reduce_grad`: before column-parallel GEMMs, whose
// input gradients are partial sums) or keep the slice (before the replicated LM head).
torch::Tensor gather_from_sequence_region(const torch::Tensor& x, const GroupPtr& tp, bool reduce_grad);
// Reduce-scatter forward, all-gather backward (after row-parallel GEMMs).
torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, const GroupPtr& tp);
// Sums over `tp` the gradients of the parameters marked sequence_parallel.
void all_reduce_sequence_parallel_gradients(const std::vector<ShardedParam>& params, const GroupPtr& tp);

// Sums gradients over `dp` in buckets of at most `bucket_bytes` (a tensor larger than a bucket
// gets its own), reverse parameter order as DDP does, all buckets in flight before the first
// wait; then divides by the group size. Returns the number of buckets.
int64_t all_reduce_gradients(const std::vector<ShardedParam>& params, const GroupPtr& dp, double bucket_bytes);

// Global L2 norm of the gradients (TP shards summed over `tp`, replicated tensors counted once,
// pipeline stages summed over `pp`), then torch's clip_grad_norm_ rule: scale by
// max_norm / (norm + 1e-6) when that is below 1. max_norm <= 0: no clipping. Returns the norm
// before clipping.
double clip_gradients(const std::vector<ShardedParam>& params, const GroupPtr& tp, const GroupPtr& pp,
                      double max_norm);

// The full tensor of a TP-sharded parameter (list-form all-gather over `tp`, concatenated).
torch::Tensor gather_full(const ShardedParam& param, const GroupPtr& tp);

}  // namespace orrery::executor
