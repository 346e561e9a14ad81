// One compute curve and one communication curve, fitted from their samples (calibration_fit.hpp
// says what is fitted and what is held).
#pragma once

#include <optional>
#include <vector>

#include "orrery/pb/calibration.pb.h"
#include "orrery/sim/calibration_fit.hpp"

namespace orrery::sim::detail {

// `defaults`: the curve in force without calibration (the start, and the value of parameters
// the samples cannot determine). Fills `report`'s held list.
// nullopt, with report.note saying why, when the samples contradict the model or determine none
// of its parameters.
std::optional<pb::ComputeCurve> fit_compute_curve(const std::vector<const ComputeSample*>& samples,
                                                  const pb::ComputeCurve& defaults,
                                                  CurveReport& report);

std::optional<pb::CommCurve> fit_comm_curve(const std::vector<const CommSample*>& samples,
                                            CurveReport& report);

// Fills samples, median and max |relative error| of `predicted` against `measured`.
void fill_error_stats(const std::vector<double>& predicted, const std::vector<double>& measured,
                      pb::FitStats& fit);

}  // namespace orrery::sim::detail
