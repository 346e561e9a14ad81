// How the executor groups parameters for data-parallel collectives: the plan library's rule
// (orrery/plan/buckets.hpp, which the lowering follows too), so that each collective it runs is one
// node of the predicted graph, with the same name and the same bytes. Torch-free; the collectives
// themselves are in src/parallel_sharding.hpp.
//
// Parameters belong to parts, the units the lowering walks: "embed" (token and position
// embeddings), "L<i>" (decoder layer i), "head" (final norm and LM head). With pp > 1 and tied
// embeddings the last stage's copy of the embedding matrix (Megatron's) is in no part: the
// lowering counts the matrix once, on the first stage, so the copy's gradient is averaged over dp
// by its own all-reduce among the finalize-gradient ones (timed in "opt.adamw") and it is never
// sharded.
//   - Gradient buckets (sharding none: all-reduce; zero1/zero2: reduce-scatter): the parts in
//     backward order (head, L<last> ... L<first>, embed), a bucket flushed once it holds at least
//     plan::gradient_bucket_params() parameters; a part is never split. Dense and routed-expert
//     weights fill separate buckets: "opt.dp.bucket<i>.<verb>" over dp, "opt.edp.bucket<i>.<verb>"
//     over the expert-data-parallel group.
//   - FSDP buckets (zero3/fsdp): consecutive parts in forward order, closed once they hold at least
//     bucket_bytes / (gathered bytes per parameter) parameters (one part each when bucket_bytes is
//     0), filled by the same plan::gradient_buckets.
//   - HSDP: the FSDP buckets over the shard group, then one "opt.hsdp.replica_all_reduce" of the
//     rank's chunks across the replica group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/executor/train_config.hpp"

namespace orrery::executor {

// The part of parameter `name` ("embed.tokens.weight" -> "embed", "layers.3.mlp.up.weight" -> "L3",
// "head.norm.weight" -> "head").
std::string parameter_part(const std::string& name);

// One data-parallel collective of a step as the executor runs it for one rank: its node name
// (for FSDP, the first micro-batch's forward gather), the parts it covers, and its parameters
// (this rank's, unsharded: the lowering's comm_bytes / 4 in fp32).
struct DataParallelCollective {
  std::string name;
  std::vector<std::string> parts;
  int64_t params = 0;
};

// The data-parallel collectives rank `rank` of `config` runs in a step, in order: gradient
// buckets then (zero1/zero2) parameter gathers, or (fsdp) the forward gathers of micro-batch 0
// (hsdp: followed by the replica all-reduce, its params the chunks': the rank's over the shard
// group's size).
// Builds the rank's model shard (no process groups) to count its parameters.
std::vector<DataParallelCollective> data_parallel_collectives(const TrainConfig& config,
                                                              int64_t rank);

}  // namespace orrery::executor
