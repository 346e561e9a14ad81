// Mixed precision (plan job.precision bf16), PyTorch AMP-style: the parameters are fp32 (they are
// the master weights, and AdamW's state is fp32), and each forward runs under autocast, which
// casts the inputs of GEMMs and attention matmuls to bf16 (and caches the bf16 copy of a weight
// for the pass). So the GEMMs, the attention core and whatever consumes their outputs run in
// bf16, the residual stream and the norms stay fp32, the loss is computed from fp32 logits, and
// the gradients come out fp32 and are reduced in fp32 (the lowering's grad_bytes 4 for bf16).
// Activations crossing pipeline stages travel as bf16 (its activation_bytes 2).
#pragma once

#include <string>

#include <torch/torch.h>

namespace orrery::executor {

// Autocast for `device` while alive, when `enabled`; leaving drops its cast cache.
class AutocastScope {
 public:
  AutocastScope(bool enabled, c10::DeviceType device, at::ScalarType dtype = at::kBFloat16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  c10::DeviceType device_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

// The element type as PeakFlops and ExecNode.dtype name it: "fp32", "bf16", "fp16", or "".
std::string dtype_name(at::ScalarType type);

}  // namespace orrery::executor
