// The per-layer op tables of a plan (models::layer_ops under the plan's sharding), computed once
// per lowering and shared with the analytic engine and the memory model, which cost the same ops.
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan {

// Whether an op holds routed experts' weights: those are sharded and reduced over the
// expert-data-parallel group (ResolvedPlan::expert_shard_degree), the rest over the gradient group.
inline bool is_expert_op(const models::LayerOp& op) { return op.name.rfind("moe.experts", 0) == 0; }

}  // namespace orrery::plan

namespace orrery::plan::detail {

// The ops of each distinct part, computed once per lowering. Decoder layers differ by their FFN
// (dense or MoE) and their attention (global, or local under a sliding window); a table is empty
// when no layer of its kind exists.
struct OpTables {
  std::vector<models::LayerOp> embedding, head;
  std::vector<models::LayerOp> dense_layer, moe_layer;
  std::vector<models::LayerOp> dense_local_layer, moe_local_layer;
  const std::vector<models::LayerOp>& layer(const pb::ModelSpec& m, int64_t l) const;
};
OpTables make_op_tables(const ResolvedPlan& plan);
models::ShardContext shard_context(const ResolvedPlan& plan);

}  // namespace orrery::plan::detail
