// Default compute efficiency curves, used when no CalibrationProfile covers a (device, op class).
#pragma once

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::sim::detail {

// For OP_CLASS_ATTENTION with `kernel` flash_2 or flash_3, the curve's max_efficiency is that
// kernel's published efficiency on the device in pass `pass` (PHASE_BACKWARD, else forward;
// topologies/attention_kernels.hpp); plan resolution has refused a kernel the device has no
// figure for (InputError here too, should a caller skip it).
pb::ComputeCurve default_curve(const pb::DeviceSpec& device, pb::OpClass op_class,
                               pb::AttentionKernel kernel = pb::ATTENTION_KERNEL_UNSPECIFIED,
                               pb::Phase pass = pb::PHASE_FORWARD);

// The curve of an op an fp8 recipe runs in fp8 (GEMM, or attention with fp8 attention), against
// the device's fp8 peak; other classes as default_curve.
pb::ComputeCurve default_fp8_curve(const pb::DeviceSpec& device, pb::OpClass op_class,
                                   pb::AttentionKernel kernel = pb::ATTENTION_KERNEL_UNSPECIFIED,
                                   pb::Phase pass = pb::PHASE_FORWARD);

}  // namespace orrery::sim::detail
