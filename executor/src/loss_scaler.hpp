// fp16's dynamic loss scaling (plan job.precision fp16), as torch.cuda.amp.GradScaler and
// Megatron's DynamicGradScaler run it: the last stage's loss is multiplied by the scale before
// backward (pipeline.hpp), so that small fp16 gradients do not flush to zero; after the gradient
// reduction the gradients AdamW will read are divided by it and checked for inf/nan, the flag
// summed over every rank in one all-reduce (the world group: every rank holds gradients, TP and
// EP shards, pipeline stages and ZeRO/FSDP chunks included), so every rank takes the same
// decision; a step with an overflow is skipped (no clipping, no AdamW) and the scale backed off,
// and after growth_interval clean steps in a row it grows. Settings: TrainConfig::loss_scaling.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "orrery/executor/train_config.hpp"
#include "process_group.hpp"

namespace orrery::executor {

class LossScaler {
 public:
  explicit LossScaler(const LossScaling& settings)
      : settings_(settings), scale_(settings.init_scale) {}

  // What this step's loss is multiplied by.
  double scale() const { return scale_; }
  // After a step: back off when it overflowed, else count it and grow after growth_interval.
  void update(bool found_inf);

  // A checkpoint's copy: {scale, clean steps since the last change}.
  torch::Tensor state() const;
  void load_state(const torch::Tensor& state);

 private:
  LossScaling settings_;
  double scale_;
  int64_t clean_steps_ = 0;
};

// Divides every defined gradient of `tensors` by `scale` in place; returns whether any of them,
// on any rank of `world` (null: this rank alone), holds an inf or nan.
bool unscale_and_check(const std::vector<torch::Tensor>& tensors, double scale,
                       const GroupPtr& world);

}  // namespace orrery::executor
