// One compute curve and one communication curve, fitted from their samples (calibration_fit.hpp
// says what is fitted and what is held).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/pb/calibration.pb.h"

namespace orrery::calibration::detail {

// `defaults`: the curve in force without calibration (the start, and the value of parameters
// the samples cannot determine). Fills `report`'s held list.
// nullopt, with report.note saying why, when the samples contradict the model or determine none
// of its parameters.
std::optional<pb::ComputeCurve> fit_compute_curve(const std::vector<const ComputeSample*>& samples,
                                                  const pb::ComputeCurve& defaults,
                                                  CurveReport& report);

// An op's own curve for one pass (ComputeCurve.op, .phase) within its class: the class's fitted
// curve `of_class` with its time beyond the overhead scaled by a factor k and an overhead of the
// op's own,
//   time = overhead_op + k x max(compute, memory) of the class's curve,
// written as the class's efficiencies divided by k. Two parameters, so that an op measured at
// two sizes extrapolates along its class's curve (a RoPE's backward is a few kernels, each priced
// like the class's ops, plus their launches) instead of refitting the class's four. nullopt, with
// report.note, as fit_compute_curve.
std::optional<pb::ComputeCurve> fit_op_curve(const std::vector<const ComputeSample*>& samples,
                                             const pb::ComputeCurve& of_class,
                                             const std::string& op, pb::Phase pass,
                                             CurveReport& report);

std::optional<pb::CommCurve> fit_comm_curve(const std::vector<const CommSample*>& samples,
                                            CurveReport& report);

// Point-to-point transfers (CommSample.collective unspecified) measured at sizes within a factor
// of kP2pSizeSpread: one size cannot separate latency from bandwidth, and a pipeline sends one
// size, so the bandwidth is held at `bandwidth` (the same scope's fitted collective `from`, which
// moved many sizes between the same kind of ranks) and the latency is the clipped mean of the
// samples' times beyond it (0 or more). Wider spreads go to fit_comm_curve.
inline constexpr double kP2pSizeSpread = 4;
pb::CommCurve fit_p2p_latency(const std::vector<const CommSample*>& samples, double bandwidth,
                              const std::string& from, CurveReport& report);

// The upper middle of `v` (its element at size/2 once sorted): the starting guesses of the fits.
// Not base::median, which averages the two middles: a start that moved would move the fits.
inline double upper_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fills samples, median and max |relative error| of `predicted` against `measured`.
void fill_error_stats(const std::vector<double>& predicted, const std::vector<double>& measured,
                      pb::FitStats& fit);

}  // namespace orrery::calibration::detail
