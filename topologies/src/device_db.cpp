// The device database: topologies/presets/devices/<name>.yaml, one DeviceSpec per file, parsed
// once on first use.
#include "orrery/topologies/device_db.hpp"

#include <algorithm>

#include "embedded_presets.hpp"
#include "orrery/base/error.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {
namespace {

std::vector<pb::DeviceSpec> load_builtin_devices() {
  std::vector<pb::DeviceSpec> devices;
  for (const auto& file : device_files::embedded_files()) {
    pb::DeviceSpec device;
    parse_spec(file.text, "presets/devices/" + std::string(file.name) + ".yaml", SpecFormat::kYaml,
               &device);
    // The file name is how people find a device; it must be the name clusters refer to.
    ORRERY_CHECK(device.name() == file.name, "presets/devices/" + std::string(file.name) +
                                                 ".yaml names device " + device.name());
    devices.push_back(std::move(device));
  }
  std::sort(devices.begin(), devices.end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
  return devices;
}

}  // namespace

const std::vector<pb::DeviceSpec>& builtin_devices() {
  static const std::vector<pb::DeviceSpec> devices = load_builtin_devices();
  return devices;
}

const pb::DeviceSpec* lookup_device(const pb::ClusterSpec& cluster, std::string_view name) {
  for (const auto& d : cluster.devices()) {
    if (d.name() == name) return &d;
  }
  for (const auto& d : builtin_devices()) {
    if (d.name() == name) return &d;
  }
  return nullptr;
}

std::vector<std::string> device_names(const pb::ClusterSpec& cluster) {
  std::vector<std::string> names;
  for (const auto& d : cluster.devices()) names.push_back(d.name());
  for (const auto& d : builtin_devices()) {
    if (std::find(names.begin(), names.end(), d.name()) == names.end()) names.push_back(d.name());
  }
  return names;
}

const pb::DeviceSpec& find_device(const pb::ClusterSpec& cluster, std::string_view name) {
  if (const pb::DeviceSpec* d = lookup_device(cluster, name)) return *d;
  throw base::InputError(
      "", 0, "device",
      "unknown device '" + std::string(name) + "'" + base::suggest(name, device_names(cluster)));
}

double peak_flops(const pb::DeviceSpec& device, std::string_view dtype) {
  const pb::PeakFlops& p = device.peak_flops();
  if (dtype == "fp64") return p.fp64();
  if (dtype == "fp32") return p.fp32();
  if (dtype == "tf32") return p.tf32();
  if (dtype == "bf16") return p.bf16();
  if (dtype == "fp16") return p.fp16();
  if (dtype == "fp8") return p.fp8();
  if (dtype == "int8") return p.int8();
  if (dtype == "fp4") return p.fp4();
  throw base::InputError(
      "", 0, "dtype",
      "unknown data type '" + std::string(dtype) + "'" +
          base::suggest(dtype, {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"}));
}

}  // namespace orrery::topologies
