// A communication curve: CollectiveCostModel's calibrated time, latency_s + bytes x busbw factor /
// bandwidth_bytes_per_s, fitted on log residuals in (latency_s, 1 / bandwidth), which is linear.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <Eigen/Dense>

#include "calibration_fit_curves.hpp"
#include "calibration_solver.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/sim/collective_algorithms.hpp"
#include "orrery/sim/collective_cost.hpp"

namespace orrery::calibration {
namespace {

enum : size_t { kLatency = 0, kSecondsPerByte = 1 };

double bus_bytes(const CommSample& s) {
  return s.bytes * sim::detail::bus_factor(s.collective, s.ranks);
}

template <typename T>
T log_comm_time(double bus, const T* v) {
  using std::log;
  return log(v[kLatency] + T(bus) * v[kSecondsPerByte]);
}

// Corrections by message size (docs/calibration.md): one point per group size and message size
// that training runs issued alone, the clipped mean ratio of their measured times to the fitted
// curve's (a mean, as the corrections by shape, because the simulator adds the times). Bench's
// back-to-back samples make none: their sizes are what the curve is fitted through, and a run's
// collective of the same size can take longer (its buffers cold, its peers just back from
// compute), which is what the points carry to other plans' collectives of that size.
void add_size_points(pb::CommCurve& c, const std::vector<const CommSample*>& samples) {
  std::map<std::pair<int64_t, double>, std::vector<double>> ratios;
  for (const CommSample* s : samples) {
    if (!s->back_to_back)
      ratios[{s->ranks, s->bytes}].push_back(s->seconds / predict_comm_seconds(c, *s));
  }
  for (const auto& [key, r] : ratios) {
    pb::SizePoint* p = c.add_size_points();
    p->set_ranks(key.first);
    p->set_bytes(key.second);
    p->set_time_ratio(orrery::base::clipped_mean(r));
    p->set_samples(static_cast<int64_t>(r.size()));
  }
}

}  // namespace

double predict_comm_seconds(const pb::CommCurve& curve, const CommSample& s) {
  return sim::CollectiveCostModel::curve_seconds(curve, s.ranks, s.bytes);
}

namespace detail {

std::optional<pb::CommCurve> fit_comm_curve(const std::vector<const CommSample*>& samples,
                                            CurveReport& report) {
  std::vector<double> measured, bus, per_byte;
  for (const CommSample* s : samples) {
    measured.push_back(s->seconds);
    bus.push_back(bus_bytes(*s));
    per_byte.push_back(s->seconds / bus.back());
  }
  // Start from the linear fit of relative errors: minimise sum ((a + b x) / t - 1)^2.
  Eigen::MatrixXd a(static_cast<Eigen::Index>(samples.size()), 2);
  Eigen::VectorXd ones = Eigen::VectorXd::Ones(a.rows());
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    const auto k = static_cast<size_t>(i);
    a(i, 0) = 1 / measured[k];
    a(i, 1) = bus[k] / measured[k];
  }
  const Eigen::Vector2d ab = a.colPivHouseholderQr().solve(ones);
  const double t_min = *std::min_element(measured.begin(), measured.end());
  const double t_max = *std::max_element(measured.begin(), measured.end());
  const double b_typical = upper_median(per_byte);
  const double latency0 = std::isfinite(ab(0)) && ab(0) > 0 ? std::min(ab(0), t_max) : 0.1 * t_min;
  const double per_byte0 = std::isfinite(ab(1)) && ab(1) > 0 ? ab(1) : b_typical;
  std::vector<detail::SolverParam> params(2);
  // Latency from 0 up; seconds per byte within 1e9 of the samples' own (a fit beyond says the
  // time does not follow the message size: it contradicts the model).
  params[kLatency] = {
      "latency_s", latency0, upper_median(measured), 0, std::numeric_limits<double>::infinity(), 0};
  params[kSecondsPerByte] = {"bandwidth_bytes_per_s", per_byte0,       b_typical,
                             1e-9 * b_typical,        1e9 * b_typical, b_typical};
  Predictor predict;
  predict.value = [&](size_t i, const double* v) { return log_comm_time(bus[i], v); };
  predict.jet = [&](size_t i, const Jet* v) { return log_comm_time(bus[i], v); };
  // One message size cannot separate latency from bandwidth: latency goes first (held at 0).
  const SolveResult solved = solve_curve(predict, measured, params, {kLatency, kSecondsPerByte});
  if (!solved.contradiction.empty()) {
    report.note =
        "the samples contradict the model (" + solved.contradiction + "): the default stays";
    return std::nullopt;
  }

  pb::CommCurve c;
  c.set_scope(samples.front()->scope);
  c.set_collective(samples.front()->collective);
  c.set_latency_s(params[kLatency].value);
  const double b = params[kSecondsPerByte].value;
  c.set_bandwidth_bytes_per_s(1 / b);
  std::vector<double> predicted;
  for (const CommSample* s : samples) predicted.push_back(predict_comm_seconds(c, *s));
  fill_error_stats(predicted, measured, *c.mutable_fit());
  for (const SolverParam& p : params) {
    const bool bandwidth = &p == &params[kSecondsPerByte];
    if (p.free) {
      c.mutable_fit()->add_fitted_params(p.name);
      // bandwidth = 1 / b: its standard error is b's divided by b^2 (first order).
      if (solved.covariance_ok)
        c.mutable_fit()->add_param_std_errors(bandwidth ? p.std_error / (b * b) : p.std_error);
    } else {
      report.held.push_back({p.name, bandwidth ? 1 / p.value : p.value, p.held_reason});
    }
  }
  if (!solved.covariance_ok)
    report.note = "no standard errors: the covariance could not be computed";
  if (c.collective() != pb::COLLECTIVE_KIND_UNSPECIFIED)
    add_size_points(c, samples);  // p2p_seconds takes none
  return c;
}

pb::CommCurve fit_p2p_latency(const std::vector<const CommSample*>& samples, double bandwidth,
                              const std::string& from, CurveReport& report) {
  std::vector<double> beyond, measured;
  for (const CommSample* s : samples) {
    measured.push_back(s->seconds);
    beyond.push_back(s->seconds - s->bytes / bandwidth);
  }
  pb::CommCurve c;
  c.set_scope(samples.front()->scope);
  c.set_collective(pb::COLLECTIVE_KIND_UNSPECIFIED);
  c.set_latency_s(std::max(0.0, base::clipped_mean(beyond)));
  c.set_bandwidth_bytes_per_s(bandwidth);
  std::vector<double> predicted;
  for (const CommSample* s : samples) predicted.push_back(predict_comm_seconds(c, *s));
  fill_error_stats(predicted, measured, *c.mutable_fit());
  c.mutable_fit()->add_fitted_params("latency_s");
  // The standard error of a mean (the clipped mean's, to first order).
  double sd = 0;
  for (double b : beyond) sd += (b - c.latency_s()) * (b - c.latency_s());
  const auto n = static_cast<double>(beyond.size());
  c.mutable_fit()->add_param_std_errors(n > 1 ? std::sqrt(sd / (n - 1) / n) : 0.0);
  report.held.push_back(
      {"bandwidth_bytes_per_s", bandwidth,
       "from the " + from + " curve of the same scope: the transfers moved one size"});
  return c;
}

}  // namespace detail
}  // namespace orrery::calibration
