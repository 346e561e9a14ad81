// FP8 recipes (plan/fp8.hpp): which ops run in fp8, the quantization ops around them, and the
// rules of a plan's fp8 fields.
#include "orrery/plan/fp8.hpp"

#include <set>

#include "orrery/topologies/device_db.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::plan {
namespace {

constexpr const char* kCastSuffix = ".fp8_cast";
constexpr const char* kGradCastSuffix = ".fp8_grad_cast";

// GEMMs that stay bf16 under every recipe: the LM head (TE's default keeps Megatron's output
// layer out of fp8) and the unfused score GEMMs of materialized attention (no fp8 batched GEMM).
bool bf16_gemm(const std::string& name) {
  return name == "head.lm" || name == "attn.scores" || name == "attn.context";
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// Per-element scale bytes written with each quantized copy (one copy per direction).
double scale_bytes_per_element(pb::Fp8Recipe recipe) {
  switch (recipe) {
    case pb::FP8_RECIPE_BLOCKWISE:
      return 4.0 / 128;  // an fp32 scale per 1x128 tile
    case pb::FP8_RECIPE_MXFP8:
      return 1.0 / 32;  // an E8M0 scale per 32 elements
    default:
      // One fp32 scale per tensor; rowwise: one per row of thousands of elements (hidden size or
      // tokens), under 0.1% of the bytes.
      return 0;
  }
}

models::LayerOp cast_op(const models::LayerOp& gemm, const char* suffix, double elements) {
  models::LayerOp c;
  c.name = gemm.name + suffix;
  c.op_class = pb::OP_CLASS_ELEMENTWISE;
  c.shape = {static_cast<int64_t>(elements)};
  return c;
}

std::string precision_name(pb::Precision p) {
  switch (p) {
    case pb::PRECISION_FP32:
      return "fp32";
    case pb::PRECISION_FP16:
      return "fp16";
    case pb::PRECISION_BF16:
      return "bf16";
    default:
      return "unspecified";
  }
}

[[noreturn]] void broken(const SourceMap& where, const std::string& field, const std::string& rule,
                         const std::string& reason) {
  where.fail(field, "rule " + rule + ": " + reason);
}

}  // namespace

const char* fp8_recipe_name(pb::Fp8Recipe recipe) {
  switch (recipe) {
    case pb::FP8_RECIPE_DELAYED:
      return "delayed";
    case pb::FP8_RECIPE_CURRENT:
      return "current";
    case pb::FP8_RECIPE_BLOCKWISE:
      return "blockwise";
    case pb::FP8_RECIPE_MXFP8:
      return "mxfp8";
    case pb::FP8_RECIPE_ROWWISE:
      return "rowwise";
    default:
      return "unspecified";
  }
}

Fp8QuantizeBytes fp8_quantize_bytes(pb::Fp8Recipe recipe) {
  // bf16 in; fp8 out twice (TN layout: cast and transpose, or row- and column-wise blocks).
  constexpr double kBf16 = 2, kFp8Copies = 2;
  Fp8QuantizeBytes q{kBf16, kFp8Copies * (1 + scale_bytes_per_element(recipe))};
  if (recipe == pb::FP8_RECIPE_CURRENT) q.read += kBf16;  // the amax pass before the cast
  // Row-wise scales do not survive a transpose, so each copy is its own quantization: the one
  // along rows computes each row's amax in the pass that casts it (one read); the one along
  // columns needs every column's amax before it casts (two reads). From the recipe's data flow,
  // not measured.
  if (recipe == pb::FP8_RECIPE_ROWWISE) q.read = 3 * kBf16;
  return q;
}

bool runs_in_fp8(const Precisions& precision, const models::LayerOp& op) {
  if (precision.dtype != kFp8Dtype) return false;
  if (op.op_class == pb::OP_CLASS_GEMM) return !bf16_gemm(op.name);
  return op.op_class == pb::OP_CLASS_ATTENTION && precision.fp8_attention;
}

double fp8_weight_copy_bytes(const Precisions& precision) {
  if (precision.dtype != kFp8Dtype) return 0;
  return fp8_quantize_bytes(precision.fp8_recipe).written;
}

Fp8Footprint fp8_footprint(const std::vector<models::LayerOp>& ops) {
  Fp8Footprint f;
  for (const auto& op : ops) {
    if (op.dtype != kFp8Dtype || op.op_class != pb::OP_CLASS_GEMM) continue;
    f.params += op.parameters;
    f.gemms += 1;
  }
  return f;
}

double fp8_scale_state_bytes(const Precisions& precision, double gemms) {
  if (precision.dtype != kFp8Dtype) return 0;
  constexpr double kFp32 = 4, kTensorsPerGemm = 3;  // input, weight, output gradient
  switch (precision.fp8_recipe) {
    case pb::FP8_RECIPE_DELAYED:  // amax history, scale and its inverse
      return gemms * kTensorsPerGemm * (kFp8AmaxHistoryLength + 2) * kFp32;
    case pb::FP8_RECIPE_CURRENT:  // scale and its inverse
      return gemms * kTensorsPerGemm * 2 * kFp32;
    default:  // block and row scales travel with the data (fp8_quantize_bytes)
      return 0;
  }
}

bool is_fp8_forward_cast(const models::LayerOp& op) { return ends_with(op.name, kCastSuffix); }
bool is_fp8_grad_cast(const models::LayerOp& op) { return ends_with(op.name, kGradCastSuffix); }

void apply_fp8(const Precisions& precision, std::vector<models::LayerOp>& ops) {
  if (precision.dtype != kFp8Dtype) return;
  const Fp8QuantizeBytes q = fp8_quantize_bytes(precision.fp8_recipe);
  std::vector<models::LayerOp> out;
  out.reserve(ops.size() * 3);
  for (models::LayerOp op : ops) {
    if (!runs_in_fp8(precision, op)) {
      out.push_back(std::move(op));
      continue;
    }
    op.dtype = kFp8Dtype;
    if (op.op_class != pb::OP_CLASS_GEMM) {  // fp8 attention: the casts fuse into the GEMMs
      out.push_back(std::move(op));
      continue;
    }
    // The GEMM reads X and W; it writes Y (bf16), whose gradient dY backward quantizes.
    const double weight_bytes = op.parameters * precision.param_bytes;
    const double x = (op.forward_bytes_read - weight_bytes) / precision.activation_bytes;
    const double dy = op.forward_bytes_written / precision.activation_bytes;
    models::LayerOp cast = cast_op(op, kCastSuffix, x);
    cast.forward_bytes_read = x * q.read;
    cast.forward_bytes_written = x * q.written;
    models::LayerOp grad = cast_op(op, kGradCastSuffix, dy);
    grad.backward_extra_bytes_read = dy * q.read;  // op_work: backward = 2 x forward (0) + extra
    grad.backward_extra_bytes_written = dy * q.written;
    // fp8 operands in; the input kept for the weight gradient is its fp8 copy (TE saves the
    // quantized tensor, one byte an element and its scales).
    op.forward_bytes_read = x + op.parameters;
    op.saved_activation_bytes *= (q.written / 2) / precision.activation_bytes;
    out.push_back(std::move(cast));
    out.push_back(std::move(op));
    out.push_back(std::move(grad));
  }
  ops = std::move(out);
}

models::LayerOp fp8_weight_cast(const Precisions& precision, const Fp8Footprint& fp8) {
  models::LayerOp w;
  if (precision.dtype != kFp8Dtype || fp8.params <= 0) return w;
  const Fp8QuantizeBytes q = fp8_quantize_bytes(precision.fp8_recipe);
  // Delayed scaling rolls every amax history and recomputes the scales once per step.
  const double state = fp8_scale_state_bytes(precision, fp8.gemms);
  w.name = "fp8.weight_cast";
  w.op_class = pb::OP_CLASS_ELEMENTWISE;
  w.shape = {static_cast<int64_t>(fp8.params)};
  w.forward_bytes_read = fp8.params * q.read + state;
  w.forward_bytes_written = fp8.params * q.written + state;
  return w;
}

double param_gather_bytes(const Precisions& precision, const std::vector<models::LayerOp>& ops,
                          bool expert) {
  constexpr double kFp8Bytes = 1;
  double bytes = 0;
  for (const auto& op : ops) {
    if ((op.name.rfind("moe.experts", 0) == 0) != expert) continue;
    const bool fp8 = precision.fp8_param_gather && op.dtype == kFp8Dtype;
    bytes += op.parameters * (fp8 ? kFp8Bytes : precision.param_bytes);
  }
  return bytes;
}

void resolve_fp8(ResolvedPlan& r, const SourceMap& where) {
  const pb::Job& job = r.plan.job();
  const bool fp8 = job.precision() == pb::PRECISION_FP8;
  if (!fp8) {
    const char* field = job.fp8_recipe() != pb::FP8_RECIPE_UNSPECIFIED ? "job.fp8_recipe"
                        : job.fp8_attention()                          ? "job.fp8_attention"
                        : job.fp8_param_gather()                       ? "job.fp8_param_gather"
                                                                       : nullptr;
    if (field != nullptr) {
      broken(where, field, "fp8-fields-need-fp8",
             "set with job.precision " + precision_name(job.precision()) +
                 "; it applies only to precision fp8");
    }
    return;
  }
  std::set<std::string> seen;
  bool all_mx = true;
  for (size_t rank = 0; rank < r.device_of_rank.size(); ++rank) {
    const pb::DeviceSpec& d = device_of(r, static_cast<int64_t>(rank));
    if (!seen.insert(d.name()).second) continue;
    if (!(d.peak_flops().fp8() > 0)) {
      broken(
          where, "job.precision", "fp8-needs-fp8-peak",
          "device " + d.name() + " has no fp8 peak (peak_flops.fp8): it has no fp8 tensor cores");
    }
    all_mx = all_mx && d.mx_formats();
    if (job.fp8_recipe() == pb::FP8_RECIPE_MXFP8 && !d.mx_formats()) {
      broken(where, "job.fp8_recipe", "mxfp8-needs-mx-formats",
             "mxfp8 needs tensor cores with MX formats (Blackwell); device " + d.name() +
                 " has none (mx_formats): use delayed, current, rowwise or blockwise");
    }
  }
  const auto sharding = r.plan.sharding();
  // What gathers fp8 weights: Megatron's distributed optimizer (--fp8-param-gather) and FSDP
  // (torchao's enable_fsdp_float8_all_gather, which casts each shard before FSDP2's all-gather).
  // DeepSpeed's ZeRO-3 gathers at the compute dtype, and unsharded weights are not gathered.
  const bool gathers = sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2 ||
                       sharding == pb::SHARDING_FSDP || sharding == pb::SHARDING_HSDP;
  if (job.fp8_param_gather() && !gathers) {
    broken(where, "job.fp8_param_gather", "fp8-param-gather-needs-sharded-parameters",
           "fp8 parameter gathers are modelled for the distributed optimizer (sharding zero1 or "
           "zero2, Megatron's --fp8-param-gather) and FSDP (fsdp or hsdp, torchao's float8 "
           "all-gather), not for sharding " +
               enum_value_name(*pb::Sharding_descriptor()->FindValueByNumber(sharding)));
  }
  Precisions& p = r.precision;
  p.fp8_recipe = job.fp8_recipe();
  if (p.fp8_recipe == pb::FP8_RECIPE_UNSPECIFIED) {
    // Transformer Engine 2.x's default recipe: MXFP8 on devices with MX tensor cores, delayed
    // scaling elsewhere; written into the plan so `--out` and the reports state it.
    p.fp8_recipe = all_mx ? pb::FP8_RECIPE_MXFP8 : pb::FP8_RECIPE_DELAYED;
    p.fp8_recipe_defaulted = true;
    r.plan.mutable_job()->set_fp8_recipe(p.fp8_recipe);
  }
  p.fp8_attention = job.fp8_attention();
  p.fp8_param_gather = job.fp8_param_gather();
}

}  // namespace orrery::plan
