// Default compute efficiency curves, used when no CalibrationProfile covers a (device, op class).
#pragma once

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"

namespace orrery::sim::detail {

pb::ComputeCurve default_curve(const pb::DeviceSpec& device, pb::OpClass op_class);

// The curve of an op an fp8 recipe runs in fp8 (GEMM, or attention with fp8 attention), against
// the device's fp8 peak; other classes as default_curve.
pb::ComputeCurve default_fp8_curve(const pb::DeviceSpec& device, pb::OpClass op_class);

}  // namespace orrery::sim::detail
