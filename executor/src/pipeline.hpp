// Pipeline parallelism: one step's forward and backward passes of all micro-batches on this
// rank's stage, GPipe (all forwards, then all backwards) or 1F1B (PipeDream-flush: pp - stage - 1
// warm-up forwards, then one forward and one backward alternately, then the remaining backwards).
// Activations go to the next stage and their gradients back with Gloo send/recv over the PP
// group; sends are waited at the end of the step, so neighbours never block each other.
#pragma once

#include <functional>
#include <vector>

#include "orrery/pb/plan.pb.h"
#include "parallel.hpp"

namespace orrery::executor {

struct PipelineStage {
  GroupPtr pp;              // null when pp == 1
  int64_t stage = 0, stages = 1;
  std::vector<int64_t> activation_shape;  // [micro_batch, seq, hidden]
  // What activations and their gradients travel as (bf16 under mixed precision); the stage
  // computes on fp32 hidden states either way (mixed_precision.hpp).
  torch::ScalarType wire_dtype = torch::kFloat32;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// `forward(m, input)` runs micro-batch m through this stage: `input` is undefined on the first
// stage, the received activation elsewhere; it returns the stage's output (the micro-batch loss
// already divided by the number of micro-batches on the last stage). Returns the sum of those
// losses on the last stage, 0 elsewhere.
double run_pipeline(const PipelineStage& stage, int64_t micro_batches, pb::PipelineSchedule schedule,
                    const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& forward);

}  // namespace orrery::executor
