// Default compute efficiency curves, used when no CalibrationProfile covers a (device, op class).
#pragma once

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"

namespace orrery::sim::detail {

pb::ComputeCurve default_curve(const pb::DeviceSpec& device, pb::OpClass op_class);

}  // namespace orrery::sim::detail
