// FP8 training as production stacks run it (Transformer Engine under Megatron-core, NeMo and
// torchtitan; DeepSeek-V3's blockwise recipe; MXFP8 on Blackwell), the one place that decides
// which ops run in fp8 and what quantizing their operands costs. docs/simulator.md, "FP8
// training", gives the sources.
//
//   In fp8: the linear layers' GEMMs (forward, data gradient, weight gradient), including MoE
//     experts and MLA projections; the attention core only with job.fp8_attention.
//   In bf16: norms, softmax, elementwise ops, embeddings, the router, the LM head (TE keeps the
//     output layer out of fp8 by default), the unfused score GEMMs of materialized attention,
//     the loss and the optimizer.
//   Quantization, as memory-bound ops on the compute stream (op class ELEMENTWISE):
//     "<gemm>.fp8_cast" before each fp8 GEMM's forward: its input X, bf16 -> fp8;
//     "<gemm>.fp8_grad_cast" before its backward: the output gradient dY;
//     "fp8.weight_cast" once per step after the optimizer: every fp8 weight (TE caches the fp8
//       weights across a step's micro-batches), with the amax history update under delayed
//       scaling.
//   Per element quantized (read, written), Hopper's fp8 GEMMs take only the TN layout, so each
//   quantized tensor is written twice (cast and transpose, or row- and column-wise blocks):
//     delayed    2, 2            amax computed by the cast kernel for the next step's scale
//     current    4, 2            an amax pass over the tensor before the cast
//     blockwise  2, 2 + 2x4/128  one fp32 scale per 1x128 tile in each direction
//     mxfp8      2, 2 + 2x1/32   one E8M0 scale per 32 elements in each direction
#pragma once

#include <string>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan {

// The dtype an fp8 op carries (LayerOp.dtype, ExecNode.dtype).
inline constexpr const char* kFp8Dtype = "fp8";

// Amax history entries per fp8 tensor under delayed scaling (TE DelayedScaling's default).
inline constexpr double kFp8AmaxHistoryLength = 1024;

// "delayed", "current", "blockwise", "mxfp8", "rowwise" (as plan files spell them).
const char* fp8_recipe_name(pb::Fp8Recipe recipe);

// Bytes read and written per element quantized by `recipe` from bf16 (see the table above).
struct Fp8QuantizeBytes {
  double read = 0, written = 0;
};
Fp8QuantizeBytes fp8_quantize_bytes(pb::Fp8Recipe recipe);

// Whether `op` runs in fp8 under `plan` (before its dtype is set: what sets it).
bool runs_in_fp8(const Precisions& precision, const models::LayerOp& op);

// Bytes each fp8 weight element keeps on the device besides its bf16 copy: the fp8 copy and its
// transpose (or column-wise blocks) with their block scales.
double fp8_weight_copy_bytes(const Precisions& precision);

// The fp8 GEMMs of some ops (after apply_fp8): their weight elements and how many there are.
struct Fp8Footprint {
  double params = 0, gemms = 0;
};
Fp8Footprint fp8_footprint(const std::vector<models::LayerOp>& ops);

// Per-tensor scaling state of `gemms` fp8 GEMMs (three tensors each: input, weight, output
// gradient): delayed keeps an amax history of kFp8AmaxHistoryLength fp32 values, a scale and its
// inverse per tensor; current a scale and its inverse; block recipes none beyond their blocks'.
double fp8_scale_state_bytes(const Precisions& precision, double gemms);

// The recipe's ops applied to one part's ops (plan::detail::make_op_tables calls it): fp8 ops
// get dtype "fp8" and fp8 operand bytes, each fp8 GEMM gets its fp8_cast before it and its
// fp8_grad_cast after it (layer_program runs the first in forward and the second in backward).
void apply_fp8(const Precisions& precision, std::vector<models::LayerOp>& ops);

// Whether `op` is a quantization op that runs only in forward (fp8_cast) or only in backward
// (fp8_grad_cast).
bool is_fp8_forward_cast(const models::LayerOp& op);
bool is_fp8_grad_cast(const models::LayerOp& op);

// The once-per-step weight cast of a rank's fp8 weights, an op "fp8.weight_cast" (ELEMENTWISE,
// shape {elements}) that runs after the optimizer: reads the bf16 weights, writes the fp8 copies;
// delayed scaling also rolls the amax histories (read and written whole:
// fp8_scale_state_bytes). No op (empty name) without fp8 weights.
models::LayerOp fp8_weight_cast(const Precisions& precision, const Fp8Footprint& fp8);

// Bytes a ZeRO-1/2 parameter all-gather moves for the dense (expert = false) or expert weights of
// `ops`: param_bytes each, but one byte for an fp8 weight under job.fp8_param_gather (the
// distributed optimizer casts its shard and gathers the fp8 copies, Megatron's
// --fp8-param-gather).
double param_gather_bytes(const Precisions& precision, const std::vector<models::LayerOp>& ops,
                          bool expert);

// Fills the fp8 fields of r.precision from the plan's job and checks their rules (fp8 needs an
// fp8 peak on every device; mxfp8 needs MX tensor cores; fp8 fields need precision fp8;
// fp8_param_gather needs the distributed optimizer, zero1 or zero2). An absent recipe becomes
// Transformer Engine's default for the plan's devices, written into r.plan and flagged in
// r.precision.fp8_recipe_defaulted so outputs can say so. Needs r.device_of_rank.
void resolve_fp8(ResolvedPlan& r, const SourceMap& where);

}  // namespace orrery::plan
