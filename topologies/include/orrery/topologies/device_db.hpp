// The built-in device database (topologies/presets/devices/<name>.yaml, compiled in): peak FLOP/s
// per dtype, memory capacity and bandwidth of each GPU type, plus the CPU device of this kind of
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

// The same lookup without throwing: nullptr when unknown.
const pb::DeviceSpec* lookup_device(const pb::ClusterSpec& cluster, std::string_view name);

// Every device name a cluster may use: its own devices, then the database's.
std::vector<std::string> device_names(const pb::ClusterSpec& cluster);

// Peak dense FLOP/s of `device` for a precision ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8",
// "int8", "fp4"); 0 when the device does not support it. InputError for an unknown name.
double peak_flops(const pb::DeviceSpec& device, std::string_view dtype);

}  // namespace orrery::topologies
