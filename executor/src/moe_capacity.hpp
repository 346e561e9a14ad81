// Which routed copies of a micro-batch's tokens the experts take, under an expert capacity
// (Megatron-core's --moe-expert-capacity-factor with its default drop policy, "probs"; the plan's
// moe_capacity_factor and moe_pad_to_capacity) or without one (every copy).
//
// Megatron computes the capacity on the tokens one rank routes (moe_utils.get_capacity):
// ceil(tokens x top_k / experts x factor) copies per expert; each expert keeps the copies with
// the highest routing weights (ties: the earlier token) and drops the rest, which then reach the
// output through the residual only (their weight is not given to the copies kept). Under sequence
// parallelism each TP rank routes its own seq / tp slice of the sequence, so the capacity and the
// choice are per slice: `token_groups` equal slices of the sequence, decided separately.
// Padded, every expert receives exactly its capacity (per slice): the missing rows are zeros, which
// contribute nothing to the output or to any gradient, so padding changes the work, not the
// numbers.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace orrery::executor {

struct MoeCapacity {
  double factor = 0;  // 0: no capacity, every copy kept
  bool pad = false;   // with a factor: every expert's rows padded to its capacity
};

// ceil(tokens x top_k / experts x factor), in Megatron's order of operations.
int64_t expert_capacity(double factor, int64_t tokens, int64_t top_k, int64_t experts);

struct RoutedCopies {
  // The kept copies (indices into the tokens x top_k copies, token-major), grouped by expert in
  // expert order, in token order within an expert.
  torch::Tensor order;
  // [experts] int64: the rows each expert receives from here (its capacity when padded).
  torch::Tensor rows;
  // Padded only: each kept copy's row in the padded buffer of experts x capacity rows (expert e's
  // rows first its kept copies, then zeros); undefined otherwise.
  torch::Tensor slot;
  int64_t padded_rows = 0;  // padded only: the buffer's rows
};

// `expert` [tokens * top_k] int64: the expert of each copy; `weight` [tokens * top_k]: its routing
// weight. `seq`: tokens per sequence (the copies come from whole sequences, token-major), which
// `token_groups` divides.
RoutedCopies route_copies(const torch::Tensor& expert, const torch::Tensor& weight, int64_t experts,
                          int64_t top_k, int64_t seq, int64_t token_groups,
                          const MoeCapacity& capacity);

}  // namespace orrery::executor
