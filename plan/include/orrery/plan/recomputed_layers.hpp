// Which decoder layers full recomputation re-runs, and which modules selective recomputation
// re-runs: one rule for the lowering (ResolvedPlan::recomputes_layer, recomputes_module) and the
// executor (executor/src/recompute.hpp), so a measured trace has its `rcp` nodes where the
// simulated graph has them.
#pragma once

#include <cstdint>

#include "orrery/pb/plan.pb.h"

namespace orrery::plan {

// Whether `plan` recomputes decoder layer `layer` (0-based over the model) whole: recompute full,
// and every layer, or layers N, 2N, ... (counted from 1) under recompute_every N.
bool recomputes_layer(const pb::Plan& plan, int64_t layer);

// Whether `plan` re-runs Megatron-core's module `module`: recompute selective, and the module
// listed in recompute_modules (core_attn when the list is empty).
bool recomputes_module(const pb::Plan& plan, pb::RecomputeModule module);

}  // namespace orrery::plan
