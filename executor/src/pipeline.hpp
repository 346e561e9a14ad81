// Pipeline parallelism: one step's forward and backward passes of all micro-batches on this
// rank's stage, in the order the lowering runs them (plan::pipeline_order): GPipe (all forwards,
// then all backwards), 1F1B (PipeDream-flush: pp - stage - 1 warm-up forwards, then one forward
// and one backward alternately, then the remaining backwards) or Megatron's interleaved 1F1B, in
// which the rank holds vp model chunks (chunk c is virtual stage c x pp + stage) and the last
// rank's chunk c feeds the first rank's chunk c + 1. Activations go to the next virtual stage and
// their gradients back with send/recv over the PP group, tagged as the lowering tags them
// ((micro-batch x virtual stages + receiving virtual stage) x 2, + 1 backward), so Gloo pairs
// each receive with its send whatever the order; sends are waited at the end of the step, so
// neighbours never block each other.
#pragma once

#include <functional>
#include <vector>

#include "orrery/pb/plan.pb.h"
#include "parallel.hpp"

namespace orrery::executor {

struct PipelineStage {
  GroupPtr pp;  // null when pp == 1
  int64_t stage = 0, stages = 1;
  int64_t chunks = 1;                     // model chunks on the rank: vp
  std::vector<int64_t> activation_shape;  // [micro_batch, seq, hidden]
  // What activations and their gradients travel as (bf16 under mixed precision); the stage
  // computes on fp32 hidden states either way (mixed_precision.hpp).
  torch::ScalarType wire_dtype = torch::kFloat32;
  // fp16's loss scale (loss_scaler.hpp): the last stage's backward starts from loss x this; the
  // loss summed for the step stays unscaled.
  double loss_scale = 1;
  c10::Device device = c10::kCPU;  // where received activations and gradients land
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  int64_t virtual_stage(int64_t chunk) const { return chunk * stages + stage; }
  // Whether `chunk` ends the model (runs the head and the loss).
  bool ends_model(int64_t chunk) const { return last() && chunk == chunks - 1; }
};

// Runs micro-batch m through model chunk `chunk` of this stage.
using ChunkForward =
    std::function<torch::Tensor(int64_t m, int64_t chunk, const torch::Tensor& input)>;

// `forward(m, chunk, input)` runs micro-batch m through a chunk of this stage: `input` is
// undefined on virtual stage 0, the received activation elsewhere; it returns the chunk's output
// (the micro-batch loss already divided by the number of micro-batches where the chunk ends the
// model). Returns the sum of those losses on the last stage, a [1] fp64 tensor on the stage's
// device (not read back, so a GPU is not waited for mid-step), zero elsewhere.
torch::Tensor run_pipeline(const PipelineStage& stage, int64_t micro_batches,
                           pb::PipelineSchedule schedule, const ChunkForward& forward);

}  // namespace orrery::executor
