// Where the default numbers come from. They are a handful of global constants per op class (not
// per model or per run), chosen from public kernel measurements and checked against the public
// training runs in shared/validation/public_runs.json (docs/validation.md shows the result).
//
// GEMM: cuBLAS reaches 70-80% of dense peak on large bf16/fp16 GEMMs on A100 and 65-75% on H100
// (the H100's peak is harder to feed); small GEMMs fall off, which the half-saturation work
// models: at 2 GFLOP (e.g. 1024 x 1024 x 1024) a GEMM reaches about half its asymptote on A100.
// Attention: FlashAttention-2 reaches ~70% of A100 peak forward and ~55% backward; on H100 the
// cuDNN / FlashAttention-3 kernels Megatron uses reach ~55-65%. Memory-bound kernels (norms,
// activations, residual adds, optimizer) and plain copies (device-to-device memcpy, which has no
// FLOPs at all) reach 75-85% of HBM bandwidth.
// Every kernel pays a launch + framework overhead of a few microseconds.
#include "orrery/sim/compute_defaults.hpp"

#include <string>

namespace orrery::sim::detail {
namespace {

struct Defaults {
  double max_efficiency;
  double half_saturation_flops;
  double memory_efficiency;
  double overhead_s;
};

constexpr double kKernelOverheadSeconds = 4e-6;
constexpr double kCpuOpOverheadSeconds = 20e-6;  // libtorch dispatch on CPU

bool is_hopper_or_newer(const std::string& name) {
  for (const char* prefix : {"H100", "H200", "H800", "B200", "GB200"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

Defaults gpu_defaults(const pb::DeviceSpec& d, pb::OpClass op) {
  const bool hopper = is_hopper_or_newer(d.name());
  switch (op) {
    case pb::OP_CLASS_GEMM:
      return {hopper ? 0.72 : 0.80, hopper ? 4e9 : 2e9, 0.80, kKernelOverheadSeconds};
    case pb::OP_CLASS_ATTENTION:
      return {hopper ? 0.58 : 0.62, hopper ? 8e9 : 4e9, 0.80, kKernelOverheadSeconds};
    case pb::OP_CLASS_ROUTER:
      return {0.30, 1e9, 0.60, kKernelOverheadSeconds};
    default:  // memory-bound classes: FLOPs are incidental
      return {0.50, 1e8, 0.80, kKernelOverheadSeconds};
  }
}

Defaults cpu_defaults(pb::OpClass op) {
  // A CPU core with OpenBLAS reaches ~60-70% of its FMA peak on large GEMMs; everything else is
  // bound by memory and dispatch.
  switch (op) {
    case pb::OP_CLASS_GEMM:
      return {0.65, 1e8, 0.5, kCpuOpOverheadSeconds};
    case pb::OP_CLASS_ATTENTION:
      return {0.35, 1e8, 0.5, kCpuOpOverheadSeconds};
    default:
      return {0.25, 1e7, 0.5, kCpuOpOverheadSeconds};
  }
}

}  // namespace

pb::ComputeCurve default_curve(const pb::DeviceSpec& device, pb::OpClass op_class) {
  const Defaults d = device.kind() == pb::DEVICE_KIND_CPU ? cpu_defaults(op_class)
                                                          : gpu_defaults(device, op_class);
  pb::ComputeCurve c;
  c.set_device(device.name());
  c.set_op_class(op_class);
  c.set_max_efficiency(d.max_efficiency);
  c.set_half_saturation_flops(d.half_saturation_flops);
  c.set_memory_efficiency(d.memory_efficiency);
  c.set_overhead_s(d.overhead_s);
  return c;
}

}  // namespace orrery::sim::detail
