// Per device architecture (DeviceSpec.architecture) and kernel, the papers' figures. Hopper parts
// other than the H100 SXM5 that the papers measured (H100 PCIe, H800, H200) run the same SM90
// kernels; their figure is the H100 SXM5's fraction of peak, applied to their own peak. A800 is an
// A100 with a narrower NVLink. The architecture, not the device's name, decides: a user's own
// device file ("my-h100-sxm", "GH200") gets the figures of the silicon it states.
#include "orrery/topologies/attention_kernels.hpp"

#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {
namespace {

// FlashAttention-2 paper (Dao 2023, arXiv 2307.08691), abstract: "reaching 50-73% of the
// theoretical maximum FLOPs/s on A100"; its forward benchmarks reach the top of the range and its
// backward ones sit lower, at the bottom of it.
constexpr AttentionKernelEfficiency kFlash2Ampere{
    0.73, 0.50,
    "FlashAttention-2 (Dao 2023, arXiv 2307.08691), abstract: 50-73% of A100 peak; forward at the "
    "range's top, backward at its bottom"};
// FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608): abstract, "FlashAttention-2
// achieving only 35% utilization on the H100 GPU"; Fig. 6 (attention backward, head dim 128, H100
// 80GB SXM5), FlashAttention-2 at 322 TFLOP/s at 16k: 322 / 989 = 0.326.
constexpr AttentionKernelEfficiency kFlash2Hopper{
    0.35, 0.326,
    "FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608): abstract, FlashAttention-2 at 35% of "
    "H100 peak forward; Fig. 6 (backward, head dim 128), 322 TFLOP/s of 989 at 16k"};
// Same paper: abstract, "FP16 reaching up to 740 TFLOPs/s (75% utilization)"; Fig. 6,
// FlashAttention-3 backward at 561 TFLOP/s at 16k, head dim 128: 561 / 989 = 0.567.
constexpr AttentionKernelEfficiency kFlash3Hopper{
    0.75, 0.567,
    "FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608): abstract, 740 TFLOP/s (75% of H100 "
    "peak) forward; Fig. 6 (backward, head dim 128), 561 TFLOP/s of 989 at 16k"};

}  // namespace

std::optional<AttentionKernelEfficiency> attention_kernel_efficiency(const pb::DeviceSpec& device,
                                                                     pb::AttentionKernel kernel) {
  const pb::DeviceArchitecture arch = device.architecture();
  if (kernel == pb::ATTENTION_KERNEL_FLASH_2) {
    if (arch == pb::DEVICE_ARCHITECTURE_AMPERE) return kFlash2Ampere;
    if (arch == pb::DEVICE_ARCHITECTURE_HOPPER) return kFlash2Hopper;
  }
  if (kernel == pb::ATTENTION_KERNEL_FLASH_3 && arch == pb::DEVICE_ARCHITECTURE_HOPPER)
    return kFlash3Hopper;
  return std::nullopt;
}

std::string attention_kernel_problem(const pb::DeviceSpec& device, pb::AttentionKernel kernel) {
  if (!names_a_generation(kernel)) return "";
  if (attention_kernel_efficiency(device, kernel)) return "";
  const std::string kernel_name = kernel == pb::ATTENTION_KERNEL_FLASH_3 ? "flash_3" : "flash_2";
  // Unknown silicon is not guessed from the name: the device file states it.
  if (device.architecture() == pb::DEVICE_ARCHITECTURE_UNSPECIFIED) {
    return "device " + device.name() + " states no architecture, and " + kernel_name +
           "'s efficiency is published per architecture: set the device's `architecture` field "
           "(flash_2 has figures for ampere and hopper, flash_3 for hopper) or use flash, the "
           "device's generic fused-attention efficiency";
  }
  // The stated architecture is named, so a device file that states the wrong one shows it.
  const auto* arch = pb::DeviceArchitecture_descriptor()->FindValueByNumber(device.architecture());
  const std::string stated =
      "device " + device.name() + " (architecture " +
      (arch != nullptr ? enum_value_name(*arch) : std::to_string(device.architecture())) + ")";
  if (kernel == pb::ATTENTION_KERNEL_FLASH_3) {
    return stated +
           " does not run flash_3: FlashAttention-3 is written for Hopper's wgmma and TMA "
           "instructions (H100, H200, H800); use flash_2 or flash";
  }
  return stated +
         " has no published flash_2 efficiency (only ampere (A100/A800) and hopper parts have "
         "one, from the FlashAttention-2 and -3 papers); use flash, the device's generic "
         "fused-attention efficiency";
}

}  // namespace orrery::topologies
