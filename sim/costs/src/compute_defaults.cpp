// Where the default numbers come from. They are a handful of global constants per op class (not
// per model or per run), chosen from public kernel measurements and checked against the public
// training runs in shared/validation/public_runs.json (docs/validation.md shows the result).
//
// GEMM: cuBLAS reaches 70-80% of dense peak on large bf16/fp16 GEMMs on A100 and 65-75% on H100
// (the H100's peak is harder to feed); small GEMMs fall off, which the half-saturation work
// models: at 2 GFLOP (e.g. 1024 x 1024 x 1024) a GEMM reaches about half its asymptote on A100.
// Attention: FlashAttention-2 reaches ~70% of A100 peak forward and ~55% backward; on H100 the
// cuDNN / FlashAttention-3 kernels Megatron uses reach ~55-65%. That is the generic `flash`
// curve; a plan naming the generation (flash_2, flash_3) takes the kernel paper's own figure per
// device and pass instead (topologies/src/attention_kernels.cpp). Memory-bound kernels (norms,
// activations, residual adds, optimizer) and plain copies (device-to-device memcpy, which has no
// FLOPs at all) reach 75-85% of HBM bandwidth.
// Every kernel pays a launch + framework overhead of a few microseconds.
//
// fp8 (default_fp8_curve; the ops an fp8 recipe runs in fp8, against the fp8 peak): NVIDIA's
// cuBLAS 12.9 post ("Boosting Matrix Multiplication Speed and Flexibility with NVIDIA cuBLAS
// 12.9", 2025) measures block-scaled fp8 GEMMs on H100 at 1.75x the bf16 baseline for large
// matmuls and at least 1.25x for most others: twice the peak at 1.75 / 2 = 0.875 of the bf16
// efficiency (0.72 -> 0.63 on Hopper). The half-saturation work doubles: a kernel's fixed costs
// (launch tail, prologue, wave quantization) take the same time at twice the rate, which puts a
// 4 GFLOP GEMM at 1.17x and a 16 GFLOP one at 1.46x its bf16 time, inside that post's range.
// The same ratio is used on every device with an fp8 peak (no other device's fp8/bf16 GEMM ratio
// was measured here). fp8 attention (TE's fp8 dot-product attention, FlashAttention-3 style):
// FlashAttention-3 (Shah et al., 2024) reaches ~740 TFLOPS in bf16 and ~1.2 PFLOPS in fp8 forward
// on H100, 1.62x for twice the peak: 0.81 of the bf16 attention efficiency.
#include "orrery/sim/compute_defaults.hpp"

#include <string>

#include "orrery/base/error.hpp"
#include "orrery/topologies/attention_kernels.hpp"

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

// Hopper and Blackwell take the Hopper figures (the H100's peak is harder to feed); every other
// GPU, one stating no architecture included, the A100's.
bool is_hopper_or_newer(const pb::DeviceSpec& d) {
  return d.architecture() == pb::DEVICE_ARCHITECTURE_HOPPER ||
         d.architecture() == pb::DEVICE_ARCHITECTURE_BLACKWELL;
}

Defaults gpu_defaults(const pb::DeviceSpec& d, pb::OpClass op) {
  const bool hopper = is_hopper_or_newer(d);
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

// A named kernel's published efficiency replaces the class's asymptote; the half-saturation
// work (how small attention falls off) stays the device's.
double kernel_efficiency(const pb::DeviceSpec& device, pb::AttentionKernel kernel, pb::Phase pass) {
  const auto e = topologies::attention_kernel_efficiency(device, kernel);
  if (!e)
    throw base::InputError("", 0, "attention_kernel",
                           topologies::attention_kernel_problem(device, kernel));
  return pass == pb::PHASE_BACKWARD ? e->backward : e->forward;
}

pb::ComputeCurve default_curve(const pb::DeviceSpec& device, pb::OpClass op_class,
                               pb::AttentionKernel kernel, pb::Phase pass) {
  Defaults d = device.kind() == pb::DEVICE_KIND_CPU ? cpu_defaults(op_class)
                                                    : gpu_defaults(device, op_class);
  if (op_class == pb::OP_CLASS_ATTENTION && topologies::names_a_generation(kernel))
    d.max_efficiency = kernel_efficiency(device, kernel, pass);
  pb::ComputeCurve c;
  c.set_device(device.name());
  c.set_op_class(op_class);
  c.set_max_efficiency(d.max_efficiency);
  c.set_half_saturation_flops(d.half_saturation_flops);
  c.set_memory_efficiency(d.memory_efficiency);
  c.set_overhead_s(d.overhead_s);
  return c;
}

namespace {
constexpr double kFp8GemmToBf16Efficiency = 1.75 / 2;             // cuBLAS 12.9 post, H100
constexpr double kFp8AttentionToBf16Efficiency = 1.2 / 0.74 / 2;  // FlashAttention-3, H100
constexpr double kFp8HalfSaturationScale = 2;                     // twice the rate, same time
}  // namespace

pb::ComputeCurve default_fp8_curve(const pb::DeviceSpec& device, pb::OpClass op_class,
                                   pb::AttentionKernel kernel, pb::Phase pass) {
  pb::ComputeCurve c = default_curve(device, op_class, kernel, pass);
  if (op_class != pb::OP_CLASS_GEMM && op_class != pb::OP_CLASS_ATTENTION) return c;
  const double ratio =
      op_class == pb::OP_CLASS_GEMM ? kFp8GemmToBf16Efficiency : kFp8AttentionToBf16Efficiency;
  c.set_max_efficiency(c.max_efficiency() * ratio);
  c.set_half_saturation_flops(c.half_saturation_flops() * kFp8HalfSaturationScale);
  return c;
}

}  // namespace orrery::sim::detail
