#include "orrery/sim/compute_cost.hpp"

#include <algorithm>
#include <cmath>

#include "compute_defaults.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::sim {
namespace {

// Efficiency from a measured table: log-linear interpolation in work, clamped at the ends.
double from_points(const pb::ComputeCurve& c, double flops) {
  const auto& p = c.points();
  if (flops <= p[0].flops()) return p[0].efficiency();
  for (int i = 1; i < p.size(); ++i) {
    if (flops <= p[i].flops()) {
      const double x0 = std::log(p[i - 1].flops()), x1 = std::log(p[i].flops());
      const double t = x1 > x0 ? (std::log(flops) - x0) / (x1 - x0) : 1.0;
      return p[i - 1].efficiency() + t * (p[i].efficiency() - p[i - 1].efficiency());
    }
  }
  return p[p.size() - 1].efficiency();
}

}  // namespace

ComputeCostModel::ComputeCostModel(std::string dtype, const pb::CalibrationProfile* calibration)
    : dtype_(std::move(dtype)), calibration_(calibration) {}

pb::ComputeCurve ComputeCostModel::curve(const pb::DeviceSpec& device, pb::OpClass op_class) const {
  if (calibration_ != nullptr) {
    for (const auto& c : calibration_->compute()) {
      if (c.device() == device.name() && c.op_class() == op_class) return c;
    }
  }
  return detail::default_curve(device, op_class);
}

double ComputeCostModel::seconds(const pb::DeviceSpec& device, pb::OpClass op_class, double flops,
                                 double bytes) const {
  if (flops <= 0 && bytes <= 0) return 0;
  const pb::ComputeCurve c = curve(device, op_class);
  double peak = topologies::peak_flops(device, dtype_);
  if (peak <= 0) peak = device.peak_flops().fp32();  // e.g. bf16 on a CPU without bf16 units
  double compute_s = 0;
  if (flops > 0 && peak > 0) {
    const double efficiency =
        c.points_size() > 0 ? from_points(c, flops)
                            : c.max_efficiency() * flops / (flops + c.half_saturation_flops());
    compute_s = flops / (peak * std::max(efficiency, 1e-6));
  }
  const double memory_s =
      bytes > 0 ? bytes / (device.memory_bandwidth_bytes_per_s() * std::max(c.memory_efficiency(), 1e-6))
                : 0;
  return c.overhead_s() + std::max(compute_s, memory_s);
}

}  // namespace orrery::sim
