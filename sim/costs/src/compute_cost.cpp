#include "orrery/sim/compute_cost.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "measured_ratio.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/sim/compute_defaults.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::sim {
namespace {

constexpr std::string_view kFp8 = "fp8";

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

// Corrections by shape (docs/calibration.md): the points of this pass and rank blended by their
// distance in log2 space (octaves over all dimensions) from `shape`.
double ComputeCostModel::shape_correction(const pb::ComputeCurve& curve,
                                          std::span<const int64_t> shape, pb::Phase phase) {
  if (curve.shape_points_size() == 0 || shape.empty()) return 1.0;
  for (int64_t d : shape) {
    if (d <= 0) return 1.0;
  }
  const pb::Phase pass = pass_of(phase);
  std::vector<detail::RatioPoint> points;
  for (const pb::ShapePoint& p : curve.shape_points()) {
    if (pass_of(p.phase()) != pass || p.shape_size() != static_cast<int>(shape.size())) continue;
    double d2 = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t at = std::max<int64_t>(p.shape(static_cast<int>(i)), 1);
      const double octaves = std::log2(static_cast<double>(shape[i]) / static_cast<double>(at));
      d2 += octaves * octaves;
    }
    points.push_back({std::sqrt(d2), p.time_ratio()});
  }
  return detail::blend_ratios(points);
}

ComputeCostModel::ComputeCostModel(std::string dtype, const pb::CalibrationProfile* calibration)
    : dtype_(std::move(dtype)), calibration_(calibration) {}

double ComputeCostModel::dispatch_s(const pb::DeviceSpec& device) const {
  if (calibration_ == nullptr) return 0;
  for (const auto& d : calibration_->dispatch_overhead()) {
    if (d.device() == device.name()) return d.per_op_s();
  }
  return 0;
}

const pb::RankSkew* ComputeCostModel::rank_skew(const pb::DeviceSpec& device) const {
  if (calibration_ == nullptr) return nullptr;
  for (const auto& k : calibration_->rank_skew()) {
    if (k.device() == device.name()) return &k;
  }
  return nullptr;
}

double host_sharing_factor(const pb::HostSharing& h, int64_t ranks_on_host) {
  if (ranks_on_host < 2 || h.ranks() < 2 || !(h.slowdown() > 0) || h.slowdown() == 1) return 1;
  // A speed-up is never extrapolated beyond the ranks it was measured with.
  const int64_t beyond_first =
      h.slowdown() < 1 ? std::min(ranks_on_host, h.ranks()) - 1 : ranks_on_host - 1;
  return 1 + (h.slowdown() - 1) * static_cast<double>(beyond_first) /
                 static_cast<double>(h.ranks() - 1);
}

const pb::HostSharing* ComputeCostModel::host_sharing(const pb::DeviceSpec& device) const {
  if (calibration_ == nullptr) return nullptr;
  for (const auto& h : calibration_->host_sharing()) {
    if (h.device() == device.name()) return &h;
  }
  return nullptr;
}

double ComputeCostModel::skew_wait_s(const pb::DeviceSpec& device, int64_t ranks,
                                     double compute_s) const {
  if (ranks < 2 || compute_s <= 0) return 0;
  const pb::RankSkew* k = rank_skew(device);
  const double spread = k == nullptr ? 0 : k->jitter_s() + k->cv() * compute_s;
  return spread > 0 ? spread * base::expected_max_of_normals(ranks) : 0;
}

const pb::ComputeCurve* ComputeCostModel::calibrated_curve(const pb::CalibrationProfile& profile,
                                                           std::string_view device,
                                                           pb::OpClass op_class,
                                                           std::string_view op, pb::Phase phase) {
  const pb::ComputeCurve* of_class = nullptr;
  for (const auto& c : profile.compute()) {
    if (c.device() != device || c.op_class() != op_class) continue;
    // A curve's phase counts as the pass it runs in, as a shape point's does (recomputation:
    // forward).
    if (!op.empty() && c.op() == op &&
        (c.phase() == pb::PHASE_UNSPECIFIED || pass_of(c.phase()) == pass_of(phase))) {
      return &c;
    }
    if (c.op().empty() && of_class == nullptr) of_class = &c;
  }
  return of_class;
}

pb::ComputeCurve ComputeCostModel::curve(const pb::DeviceSpec& device, pb::OpClass op_class,
                                         std::string_view op, pb::Phase phase) const {
  if (calibration_ != nullptr) {
    if (const auto* c = calibrated_curve(*calibration_, device.name(), op_class, op, phase))
      return *c;
  }
  return detail::default_curve(device, op_class);
}

double ComputeCostModel::seconds(const pb::DeviceSpec& device, pb::OpClass op_class, double flops,
                                 double bytes, std::span<const int64_t> shape, pb::Phase phase,
                                 std::string_view op, std::string_view op_dtype,
                                 pb::AttentionKernel kernel) const {
  if (flops <= 0 && bytes <= 0) return 0;
  const bool fp8 = dtype_ == kFp8 && op_dtype == kFp8;
  // The calibrated curve by reference (its shape points can run to hundreds: no copy per op);
  // the default one is built, as curve() does.
  const pb::ComputeCurve* calibrated =
      calibration_ != nullptr && !fp8
          ? calibrated_curve(*calibration_, device.name(), op_class, op, phase)
          : nullptr;
  const pb::ComputeCurve fallback =
      calibrated != nullptr ? pb::ComputeCurve()
      : fp8                 ? detail::default_fp8_curve(device, op_class, kernel, pass_of(phase))
                            : detail::default_curve(device, op_class, kernel, pass_of(phase));
  const pb::ComputeCurve& c = calibrated != nullptr ? *calibrated : fallback;
  // An fp8 plan's other ops run in bf16 (plan/fp8.hpp).
  double peak = topologies::peak_flops(device, fp8 ? kFp8 : dtype_ == kFp8 ? "bf16" : dtype_);
  if (peak <= 0) peak = device.peak_flops().fp32();  // e.g. bf16 on a CPU without bf16 units
  double compute_s = 0;
  if (flops > 0 && peak > 0) {
    const double efficiency =
        c.points_size() > 0 ? from_points(c, flops)
                            : c.max_efficiency() * flops / (flops + c.half_saturation_flops());
    compute_s = flops / (peak * std::max(efficiency, 1e-6));
  }
  const double memory_s =
      bytes > 0
          ? bytes / (device.memory_bandwidth_bytes_per_s() * std::max(c.memory_efficiency(), 1e-6))
          : 0;
  return (c.overhead_s() + std::max(compute_s, memory_s)) * shape_correction(c, shape, phase);
}

}  // namespace orrery::sim
