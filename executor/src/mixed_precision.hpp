// Mixed precision (plan job.precision bf16), PyTorch AMP-style: the parameters are fp32 (they are
// the master weights, and AdamW's state is fp32), and each forward runs under autocast, which
// casts the inputs of GEMMs and attention matmuls to bf16 (and caches the bf16 copy of a weight
// for the pass). So the GEMMs, the attention core and whatever consumes their outputs run in
// bf16, the residual stream and the norms stay fp32, the loss is computed from fp32 logits, and
// the gradients come out fp32 and are reduced in fp32 (the lowering's grad_bytes 4 for bf16).
// Activations crossing ranks travel as bf16 (its activation_bytes 2): between pipeline stages,
// in the TP/SP collectives and the EP all-to-alls. Under ZeRO and FSDP the parameters are
// gathered as bf16 (its param_bytes 2) from the fp32 master chunks, and the model computes with
// those bf16-rounded values (held in fp32 tensors, so autocast's casts of them are exact), as
// Megatron's distributed optimizer does.
//
// Gloo 1.13's typed collectives (all-reduce, all-gather, all-to-all, broadcast) reject bf16
// tensors, and int16 ones too ("Invalid scalar type"); they carry fp16 ones, and send/recv carry
// any type (measured: see docs/executor.md). So the moving collectives carry bf16 tensors as fp16
// views of the same bytes (bit-exact: nothing is computed on them), and the reductions run as
// moving collectives plus a local sum in fp32 (parallel_collectives.cpp).
#pragma once

#include <optional>
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

// The type autocast computes GEMMs in on `device` while it is on there; nullopt when it is off.
std::optional<at::ScalarType> autocast_type(c10::DeviceType device);

// The type activations cross ranks in: bf16 under bf16 autocast on x's device, whatever x's own
// type (the lowering's activation_bytes 2); otherwise x's own type (fp32 runs are unchanged).
at::ScalarType activation_wire_type(const torch::Tensor& x);

// `t` as Gloo's moving collectives accept it: a bf16 tensor as an fp16 view of its bytes (see the
// file comment), any other tensor as itself. The view shares t's storage: a collective writing
// into it fills t.
torch::Tensor gloo_view(const torch::Tensor& t);

// The element type as PeakFlops and ExecNode.dtype name it: "fp32", "bf16", "fp16", or "".
std::string dtype_name(at::ScalarType type);

}  // namespace orrery::executor
