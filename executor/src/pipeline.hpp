// Pipeline parallelism: one step's forward and backward passes of all micro-batches on this
// rank's stage, GPipe (all forwards, then all backwards) or 1F1B (PipeDream-flush: pp - stage - 1
// warm-up forwards, then one forward and one backward alternately, then the remaining backwards).
// Activations go to the next stage and their gradients back with send/recv over the PP group
// (Gloo, or NCCL on a GPU, which matches each pair's sends and receives in issue order: both
// stages walk the same micro-batch sequence, so the orders agree); sends are waited at the end of
// the step, so neighbours never block each other.
#pragma once

#include <functional>
#include <vector>

#include "orrery/pb/plan.pb.h"
#include "parallel.hpp"

namespace orrery::executor {

struct PipelineStage {
  GroupPtr pp;  // null when pp == 1
  int64_t stage = 0, stages = 1;
  std::vector<int64_t> activation_shape;  // [micro_batch, seq, hidden]
  // What activations and their gradients travel as (bf16 under mixed precision); the stage
  // computes on fp32 hidden states either way (mixed_precision.hpp).
  torch::ScalarType wire_dtype = torch::kFloat32;
  c10::Device device = c10::kCPU;  // where received activations and gradients land
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// `forward(m, input)` runs micro-batch m through this stage: `input` is undefined on the first
// stage, the received activation elsewhere; it returns the stage's output (the micro-batch loss
// already divided by the number of micro-batches on the last stage). Returns the sum of those
// losses on the last stage, a [1] fp64 tensor on the stage's device (not read back, so a GPU is
// not waited for mid-step), zero elsewhere.
torch::Tensor run_pipeline(
    const PipelineStage& stage, int64_t micro_batches, pb::PipelineSchedule schedule,
    const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& forward);

}  // namespace orrery::executor
