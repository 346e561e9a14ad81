// One curve's fit: bounded nonlinear least squares on log(predicted / measured) with Ceres, then
// which parameters the samples really determine (the others are held), then standard errors
// from Ceres' covariance. Shared by the compute and the communication fits, which differ only
// in their prediction formula.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ceres/jet.h"

namespace orrery::calibration::detail {

struct SolverParam {
  SolverParam() = default;
  SolverParam(std::string name_, double value_, double scale_, double lower_, double upper_,
              double hold_value_)
      : name(std::move(name_)),
        value(value_),
        scale(scale_),
        lower(lower_),
        upper(upper_),
        hold_value(hold_value_) {}

  std::string name;  // as the proto field ("max_efficiency")
  double value = 0;  // start; on return the fitted or held value
  double scale = 1;  // typical magnitude: the solver works on value / scale
  // Bounds. A lower bound of 0 on an additive term (an overhead, a latency) is natural: a fit
  // that runs there holds the term at 0. Any other bound is a sanity limit (an efficiency of
  // 1e-4 or 100): a fit that runs there contradicts the model, and the curve is not fitted.
  double lower = 0, upper = std::numeric_limits<double>::infinity();
  // A positive lower bound that is natural too (a scale's floor): a fit that runs there holds
  // the parameter at it, as an additive term at 0.
  bool natural_lower = false;
  double hold_value = 0;  // what it is set to when the samples cannot determine it
  bool free = true;
  std::string held_reason;  // set when held
  double std_error = 0;     // fitted parameters: from the covariance
};

// log(predicted) of sample i at parameter values p (in real units), for doubles and for the
// Jets Ceres differentiates with. Samples' measured seconds are passed separately.
using Jet = ceres::Jet<double, 8>;  // up to 8 parameters
struct Predictor {
  std::function<double(size_t, const double*)> value;
  std::function<Jet(size_t, const Jet*)> jet;
};

struct SolveResult {
  double cost = 0;  // 1/2 sum of squared log residuals
  bool covariance_ok = false;
  // Set when a parameter ran to a sanity bound ("bandwidth_bytes_per_s runs to its lower
  // bound"): the samples contradict the model and the values mean nothing.
  std::string contradiction;
};

// Fits `params` (free ones from their start values; the order of `hold_order` says which to give
// up first when the samples cannot separate them) to `measured` seconds. `starts`: alternative
// start vectors tried on the first round; the lowest cost wins.
SolveResult solve_curve(const Predictor& predict, const std::vector<double>& measured,
                        std::vector<SolverParam>& params, const std::vector<size_t>& hold_order,
                        const std::vector<std::vector<double>>& starts = {});

}  // namespace orrery::calibration::detail
