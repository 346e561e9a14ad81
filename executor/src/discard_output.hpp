// Megatron-core's output-discarding recomputation (recompute selective with recompute_modules
// layernorm; its CheckpointWithoutOutput), as the lowering prices it (plan/src/layer_program.cpp,
// module_reruns): a block norm runs without saving anything inside it, its output is freed once
// the block's forward has read it, and just before the block's backward (when the gradient of the
// block's output arrives) the norm runs again into the same memory, timed in the recompute phase
// (`L3.mb0.rcp.attn.norm`), so that the readers' backward finds the values they saved. The norm's
// own backward then differentiates that re-run, whose input gradient joins the residual's
// afterwards: the same sums in another order, so the gradients move by about an ulp.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "recompute.hpp"

namespace orrery::executor {

struct DiscardState;

class DiscardedOutput {
 public:
  DiscardedOutput();
  ~DiscardedOutput();
  DiscardedOutput(const DiscardedOutput&) = delete;
  DiscardedOutput& operator=(const DiscardedOutput&) = delete;

  // region(inputs) with nothing inside it saved for backward; its output, which the block reads
  // as usual. At least one input must require grad. `region` must own what it captures.
  torch::Tensor run(const std::vector<torch::Tensor>& inputs, RecomputedRegion region);
  // Frees the output's memory (the block's forward has read it) and returns `block_output`
  // (computed from it) as an identity whose backward re-runs the region into that memory.
  torch::Tensor discard_until(const torch::Tensor& block_output);

 private:
  c10::intrusive_ptr<DiscardState> state_;
};

}  // namespace orrery::executor
