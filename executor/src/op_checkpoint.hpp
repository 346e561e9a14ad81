// Op-level selective activation checkpointing (plan field `recompute: selective_op`): torchtitan's
// "selective, op" policy as plan/op_sac.hpp defines it and the lowering prices it. Each decoder
// layer runs as a recomputed region (recompute.hpp: only its input is saved, its forward re-run
// just before its backward), but its first forward also keeps, outside autograd, the output of
// the attention kernel and of every other matmul (plan::keeps_matmul, counted in call order from
// the layer's start), and the re-run takes those from memory instead of computing them. So the
// re-run computes the norms, RoPE, activations, residual adds, the experts and every second
// matmul, and the measured trace has `rcp` nodes exactly where the lowering has them (none for an
// op all of whose matmuls are kept).
//
// A kept output re-enters the re-run's autograd graph through a function whose backward computes
// the gradients the op's own backward would: for a matmul y = x W^T + b, dx = dy W, dW = dy^T x
// and db = sum(dy) from the re-run's x and W; for the attention kernel, the kernel run again under
// autograd from the re-run's q, k and v inside its backward (as flash attention's backward
// re-computes the scores from Q, K and its softmax statistics), timed as the kernel's backward.
//
// The layer's collectives (TP's all-gathers, reduce-scatters and all-reduces, EP's all-to-alls)
// are kept too, as the lowering re-runs none inside a checkpointed layer: the re-run takes each
// one's output from memory, in the order the first forward ran them, and its backward
// communicates as usual.
//
// What is kept lives in one table per rank process, keyed by layer, micro-batch and op, from the
// layer's forward to its backward: a pipeline schedule with several micro-batches in flight keeps
// each one's outputs apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "recompute.hpp"

namespace orrery::executor {

// For its lifetime, decoder layer `layer`'s checkpointed region (its first forward, or its re-run
// when recomputing()): the layer's matmuls are counted from 0 and what is kept is keyed by
// `layer` and the current micro-batch. Regions do not nest.
class OpCheckpointScope {
 public:
  explicit OpCheckpointScope(int64_t layer);
  ~OpCheckpointScope();
  OpCheckpointScope(const OpCheckpointScope&) = delete;
  OpCheckpointScope& operator=(const OpCheckpointScope&) = delete;
};

// Whether an OpCheckpointScope is open: the op being run is inside a checkpointed layer.
bool op_checkpointing();

// Whether each of the layer's next `count` matmuls is kept (plan::keeps_matmul); advances the
// layer's count.
std::vector<bool> next_matmuls_kept(size_t count);

// y = x W^T + b (b may be undefined) for a kept matmul, `what` naming it within the layer: in the
// first forward computed and kept; in the re-run the kept output, wired into autograd as above.
torch::Tensor kept_linear(const std::string& what, const torch::Tensor& x, const torch::Tensor& w,
                          const torch::Tensor& b);

// region(inputs) whose output is kept (the attention kernel): in the first forward computed and
// kept; in the re-run the kept output, whose backward runs region again under autograd (with no
// op timed inside it) for the inputs' gradients. `region` must own what it captures.
torch::Tensor kept_region(const std::string& what, const std::vector<torch::Tensor>& inputs,
                          RecomputedRegion region);

// The forward output of a collective, `run()` (which times it): outside a checkpointed layer
// run; inside one run and kept in the first forward, the kept output in the re-run (not run, not
// timed). Called from the collective's autograd forward, so its backward is wired as usual.
torch::Tensor kept_collective(const std::function<torch::Tensor()>& run);

// Outputs kept and not yet taken back by a re-run: 0 after every step's backward.
size_t kept_outputs_pending();

}  // namespace orrery::executor
