// AdamW whose moments are stored in bf16 (plan field optimizer_state_dtype: bf16): Megatron-core's
// precision-aware optimizer (--use-precision-aware-optimizer with --exp-avg-dtype and
// --exp-avg-sq-dtype bf16, Transformer Engine's FusedAdam). Each step reads the moments into
// fp32, updates them and the parameter in fp32 exactly as torch::optim::AdamW does (decoupled
// weight decay first, bias corrections, eps outside the square root), and stores the new moments
// rounded to bf16 (round to nearest even). The parameters (the fp32 masters) and the step count
// are unchanged; the memory model prices the moments at 2 bytes each (sim/costs memory_model).
#pragma once

#include <torch/torch.h>

namespace orrery::executor {

class AdamWBf16Moments : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace orrery::executor
