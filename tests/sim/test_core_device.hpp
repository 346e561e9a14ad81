// The device the calibration-fit tests fit on: a CPU core with round numbers, 100 GFLOP/s fp32
// and 20 GB/s, so expected times can be worked out by hand.
#pragma once

#include <map>
#include <string>

#include "orrery/pb/cluster.pb.h"

namespace orrery::sim::test {

inline pb::DeviceSpec test_core() {
  pb::DeviceSpec d;
  d.set_name("test-core");
  d.set_kind(pb::DEVICE_KIND_CPU);
  d.mutable_peak_flops()->set_fp32(100e9);
  d.set_memory_bytes(1e9);
  d.set_memory_bandwidth_bytes_per_s(20e9);
  return d;
}

inline std::map<std::string, pb::DeviceSpec> test_core_devices() {
  return {{"test-core", test_core()}};
}

}  // namespace orrery::sim::test
