// The built-in device database (topologies/presets/devices.yaml, compiled in): peak FLOP/s per
// dtype, memory capacity and bandwidth of each GPU type, plus the CPU device of this kind of
// machine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "orrery/pb/cluster.pb.h"

namespace orrery::topologies {

const std::vector<pb::DeviceSpec>& builtin_devices();

// A device by name: the cluster's own devices first, then the database. InputError with a
// suggestion when unknown.
const pb::DeviceSpec& find_device(const pb::ClusterSpec& cluster, std::string_view name);

// Peak dense FLOP/s of `device` for a precision ("bf16", "fp16", "fp8", "fp32", "tf32"); 0 when
// the device does not support it.
double peak_flops(const pb::DeviceSpec& device, std::string_view dtype);

}  // namespace orrery::topologies
