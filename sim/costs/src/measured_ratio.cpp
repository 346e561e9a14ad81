#include "measured_ratio.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace orrery::sim::detail {
namespace {

constexpr double kFadeOctaves = 2.0;

}  // namespace

double blend_ratios(const std::vector<RatioPoint>& points) {
  double weights = 0, weighted_log = 0, nearest = std::numeric_limits<double>::infinity();
  for (const RatioPoint& p : points) {
    if (!(p.ratio > 0)) continue;
    if (p.octaves == 0) return p.ratio;  // calibration keeps one point per shape or size
    const double d2 = p.octaves * p.octaves;
    nearest = std::min(nearest, p.octaves);
    weights += 1 / d2;
    weighted_log += std::log(p.ratio) / d2;
  }
  if (weights == 0) return 1.0;
  const double fade = std::exp(-(nearest / kFadeOctaves) * (nearest / kFadeOctaves));
  return std::exp(fade * weighted_log / weights);
}

}  // namespace orrery::sim::detail
