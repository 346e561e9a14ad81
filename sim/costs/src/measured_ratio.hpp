// Measured time ratios (measured time over a curve's) at points some distance from where a cost
// is wanted, blended into one correction: the compute curves' corrections by shape and the
// communication curves' corrections by message size (docs/calibration.md).
#pragma once

#include <vector>

namespace orrery::sim::detail {

struct RatioPoint {
  double octaves = 0;  // distance from the point wanted, in log2 space (>= 0)
  double ratio = 1;    // measured / curve at the point (> 0)
};

// Inverse-distance weighting (Shepard's method, power 2) of the points' log ratios, so a measured
// point is priced exactly as measured (distance 0: its ratio) and points between interpolate;
// then faded towards 1 (the curve alone) by exp(-(d / 2)^2), d the distance to the nearest
// point: one octave from every point keeps 78% of the correction, two octaves 37%, three 11%,
// rather than extrapolating one point's quirk. No points: 1.
double blend_ratios(const std::vector<RatioPoint>& points);

}  // namespace orrery::sim::detail
