// The published efficiency of each named fused-attention kernel (plan.proto's AttentionKernel
// flash_2 and flash_3) on each device, forward and backward, with its source: the fraction of the
// device's dense peak at the plan's precision that the kernel's own paper measured at long
// sequences (causal, head dimension 128, FLOPs counted as the papers count them: 4 s^2 d per head
// forward, halved for causal, 2.5x that backward, as models/layer_ops counts attn.core). The
// compute cost model prices attn.core with it (sim/costs); plan resolution refuses a kernel a
// device has no figure for (rule attention-kernel-on-device), naming why.
#pragma once

#include <optional>
#include <string>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::topologies {

struct AttentionKernelEfficiency {
  double forward = 0;   // of the dense peak, forward pass (recomputation runs it again)
  double backward = 0;  // of the dense peak, backward pass
  const char* source = "";
};

// Whether `kernel` names a generation (flash_2, flash_3), priced at its paper's figure per device;
// every other kernel is priced at the device's generic curves and runs on every device.
inline bool names_a_generation(pb::AttentionKernel kernel) {
  return kernel == pb::ATTENTION_KERNEL_FLASH_2 || kernel == pb::ATTENTION_KERNEL_FLASH_3;
}

// The kernel's efficiency on `device`, or nullopt when no paper measured it there (or the kernel
// does not run there); only for flash_2 and flash_3.
std::optional<AttentionKernelEfficiency> attention_kernel_efficiency(const pb::DeviceSpec& device,
                                                                     pb::AttentionKernel kernel);

// Why `device` cannot run `kernel` as orrery prices it, or empty when it can (every kernel but
// flash_2 and flash_3 runs everywhere at the device's generic efficiency).
std::string attention_kernel_problem(const pb::DeviceSpec& device, pb::AttentionKernel kernel);

}  // namespace orrery::topologies
