// Per-rank peak memory of a plan: parameters, gradients and optimizer state per ZeRO stage and
// precision; activations per recomputation policy, summed over the micro-batches a pipeline rank
// holds at once under its schedule; communication buffers; allocator overhead. One entry per
// pipeline rank (all ranks of a stage hold the same).
#pragma once

#include <vector>

#include "orrery/pb/sim_result.pb.h"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::sim {

// Fixed costs that do not scale with the model, per GPU: the CUDA context, cuBLAS/cuDNN
// workspaces and NCCL's channel buffers for a handful of communicators (measured on H100 with
// PyTorch 2.x: ~0.5 GiB context + ~0.25 GiB workspaces + ~0.4 GiB NCCL). CPU devices have none.
inline constexpr double kGpuRuntimeBytes = 1.15 * 1024 * 1024 * 1024;
// The caching allocator's fragmentation, as a fraction of the activations it churns.
inline constexpr double kAllocatorFragmentation = 0.08;

std::vector<pb::RankMemory> memory_per_stage(const plan::ResolvedPlan& plan);

}  // namespace orrery::sim
