// Activation recomputation (plan field `recompute`), as the lowering runs it
// (plan/src/lower.cpp, layer_program.cpp): `full` re-runs each decoder layer's forward from its
// saved input just before the layer's backward; `selective` (Megatron's) re-runs the modules of
// recompute_modules: core_attn (the default) the ops the layer decomposition marks
// `selective_recompute`, the attention core (fused `attn.core`, or `attn.scores`, `attn.softmax`
// and `attn.context`), before their backward; mlp the dense MLP from its normalized input, its TP
// collectives included, when the backward reaches the MLP's output. The first forward
// saves nothing inside the recomputed region but its inputs; the recomputation runs the same ops
// on the same inputs (the CPU kernels are deterministic and the model has no dropout), so the
// gradients, and so the losses, are bit-identical to a run without it.
//
// While the recomputation runs, op and collective names take phase "rcp" instead of "fwd"
// (op_trace.hpp's site_name), so a measured trace has the lowering's `L3.mb0.rcp.attn.qkv` nodes.
// It runs inside the backward pass as PyTorch's reentrant checkpoint does: the recomputed graph
// is differentiated by a nested backward that accumulates the parameters' gradients into their
// .grad (through the same accumulators, so overlap_grad_reduce's hooks fire) and hands the
// inputs' gradients back to the outer pass.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "orrery/pb/plan.pb.h"

namespace orrery::executor {

// The plan's recomputation for this rank process, set once by the trainer before the first step
// and read by the model's forward pass (a process is one rank, like op_trace.hpp's current trace).
pb::Recompute recompute_mode();
// The plan's recompute and recompute_every (which layers full recomputation re-runs).
void set_recompute_mode(const pb::Plan& plan);
// Whether decoder layer `layer` (0-based over the model) is recomputed whole: the lowering's rule,
// plan::recomputes_layer (orrery/plan/recomputed_layers.hpp).
bool recomputes_layer(int64_t layer);
// Whether selective recomputation re-runs Megatron-core's module `module` (recompute_modules;
// core_attn when the list is empty): plan::recomputes_module.
bool recomputes_module(pb::RecomputeModule module);

// While true (a region re-run in the backward pass), op_trace.hpp's site_name gives phase "fwd"
// as "rcp", the lowering's name for recomputed ops and their collectives.
bool recomputing();
void set_recomputing(bool on);

// recomputing() while alive.
class RecomputingScope {
 public:
  RecomputingScope() : previous_(recomputing()) { set_recomputing(true); }
  ~RecomputingScope() { set_recomputing(previous_); }
  RecomputingScope(const RecomputingScope&) = delete;
  RecomputingScope& operator=(const RecomputingScope&) = delete;

 private:
  bool previous_;
};

// A region's forward as a function of its inputs. It must own what it captures (it runs again in
// the backward pass, after its caller returned) and depend on nothing else that requires grad
// but parameters (leaf tensors).
using RecomputedRegion = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// A region kept to run again in the backward pass, under the autocast state of the call that
// made it (autograd runs backward functions without one). Used by recompute_in_backward and by
// op-level checkpointing's kept attention kernel (op_checkpoint.hpp).
class RegionReplay {
 public:
  // Captures autocast_type(device) now.
  RegionReplay(RecomputedRegion region, c10::DeviceType device);
  const RecomputedRegion& region() const { return region_; }  // for the first run
  // region on detached copies of `saved` (each requiring grad as its original did), with grad
  // mode on and the captured autocast; the copies go to `inputs`, for the caller to read their
  // gradients once it has differentiated the result.
  torch::Tensor run(const std::vector<torch::Tensor>& saved,
                    std::vector<torch::Tensor>& inputs) const;

 private:
  RecomputedRegion region_;
  c10::DeviceType device_;
  std::optional<at::ScalarType> autocast_;
};

// region(inputs), keeping only `inputs` for backward; recomputed (under the autocast state of
// this call) when the backward pass reaches it. At least one input must require grad.
torch::Tensor recompute_in_backward(const std::vector<torch::Tensor>& inputs,
                                    RecomputedRegion region);

}  // namespace orrery::executor
