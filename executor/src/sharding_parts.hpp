// The grouping rule of the data-parallel collectives (orrery/executor/data_parallel.hpp): the
// parts a rank's parameters belong to, the gradient buckets and FSDP buckets they fill, and the
// lowering's node names for them. Each collective the strategies (sharding_strategy.hpp) run is
// one of these groups, so that it is one node of the predicted graph.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model.hpp"
#include "orrery/pb/plan.pb.h"

namespace orrery::executor {

// The parameters of one part ("embed", "L<i>", "head") that a collective covers.
struct ModelPart {
  std::string name;
  int64_t layer = -1;          // decoder layer; -1: embed or head
  std::vector<size_t> params;  // indices into the model's parameters, in model order
  int64_t numel = 0;
};

// This rank's parts in forward order, over its routed-expert parameters (`experts`) or the others.
std::vector<ModelPart> model_parts(const std::vector<ShardedParam>& params, bool experts);

// This rank's parts in forward order over the parameters `keep` accepts (a pipeline stage's copy
// of the tied embedding is in none).
std::vector<ModelPart> parts_of(const std::vector<ShardedParam>& params,
                                const std::function<bool(const ShardedParam&)>& keep);

// Forward position of a part: embed, L0, L1, ..., head.
int64_t part_order(const std::string& part);

// Gradient buckets: indices into `parts` in backward order, named
// "opt.<group_name>.bucket<i>.<all_reduce|reduce_scatter>".
struct GradBucket {
  std::string name;
  std::vector<size_t> parts;
  int64_t numel = 0;
};
std::vector<GradBucket> gradient_buckets(const std::vector<ModelPart>& parts, double bucket_params,
                                         const std::string& group_name, bool reduce_scatter);

// FSDP buckets of `parts` (forward order): runs of consecutive parts gathered together, up to
// bucket_bytes of gathered parameters (the lowering's rule), as indices into `parts`.
std::vector<std::vector<size_t>> fsdp_buckets(const std::vector<ModelPart>& parts,
                                              const pb::Plan& plan);

// The lowering's node name of FSDP collective `op` ("fsdp.all_gather") of `part` in micro-batch
// `micro_batch`, phase "fwd" or "bwd": "L3.mb0.fwd.fsdp.all_gather",
// "mb1.bwd.embed.fsdp.reduce_scatter".
std::string fsdp_node_name(const ModelPart& part, int64_t micro_batch, const char* phase,
                           const std::string& op);

}  // namespace orrery::executor
