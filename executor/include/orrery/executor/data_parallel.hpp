// How the executor groups parameters for data-parallel collectives: the simulator's rule
// (sim/src/lower_data_parallel.cpp), so that each collective it runs is one node of the predicted
// graph, with the same name and the same bytes. Torch-free; the collectives themselves are in
// src/parallel_sharding.hpp.
//
// Parameters belong to parts, the units the lowering walks: "embed" (token and position
// embeddings), "L<i>" (decoder layer i), "head" (final norm and LM head). With pp > 1 and tied
// embeddings the last stage's copy of the embedding matrix (Megatron's) is in no part: the
// lowering counts the matrix once, on the first stage, so the copy's gradient is averaged over dp
// by its own all-reduce among the finalize-gradient ones (timed in "opt.adamw") and it is never
// sharded.
//   - Gradient buckets (sharding none: all-reduce; zero1/zero2: reduce-scatter): the parts in
//     backward order (head, L<last> ... L<first>, embed), a bucket flushed once it holds at least
//     gradient_bucket_params() parameters; a part is never split. Dense and routed-expert weights
//     fill separate buckets: "opt.dp.bucket<i>.<verb>" over dp, "opt.edp.bucket<i>.<verb>" over the
//     expert-data-parallel group.
//   - FSDP buckets (zero3/fsdp): consecutive parts in forward order, closed once they hold at least
//     bucket_bytes / 4 parameters (one part each when bucket_bytes is 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/executor/train_config.hpp"

namespace orrery::executor {

// The part of parameter `name` ("embed.tokens.weight" -> "embed", "layers.3.mlp.up.weight" -> "L3",
// "head.norm.weight" -> "head").
std::string parameter_part(const std::string& name);

// Parameters per gradient bucket: bucket_bytes / grad_bytes, or Megatron's default
// max(40e6, 1e6 x dp) when bucket_bytes is 0.
double gradient_bucket_params(double bucket_bytes, int64_t dp, double grad_bytes = 4);

// Gradient buckets over parts given in backward order with their parameter counts: each bucket
// is a run of consecutive indices, flushed when it reaches `bucket_params`.
std::vector<std::vector<size_t>> fill_gradient_buckets(const std::vector<int64_t>& part_params, double bucket_params);

// FSDP buckets over parts given in forward order: runs of consecutive indices, closed when they
// reach `limit` parameters (limit 0: one part per bucket).
std::vector<std::vector<size_t>> fill_fsdp_buckets(const std::vector<int64_t>& part_params, double limit);

// One data-parallel collective of a step as the executor runs it for one rank: its node name
// (for FSDP, the first micro-batch's forward gather), the parts it covers, and its parameters
// (this rank's, unsharded: the lowering's comm_bytes / 4 in fp32).
struct DataParallelCollective {
  std::string name;
  std::vector<std::string> parts;
  int64_t params = 0;
};

// The data-parallel collectives rank `rank` of `config` runs in a step, in order: gradient
// buckets then (zero1/zero2) parameter gathers, or (fsdp) the forward gathers of micro-batch 0.
// Builds the rank's model shard (no process groups) to count its parameters.
std::vector<DataParallelCollective> data_parallel_collectives(const TrainConfig& config, int64_t rank);

}  // namespace orrery::executor
