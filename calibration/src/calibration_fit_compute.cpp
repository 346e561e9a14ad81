// A compute curve: ComputeCostModel's formula, time = overhead_s + max((F + half_saturation_flops)
// / (peak x max_efficiency), bytes / (bandwidth x memory_efficiency)) — the efficiency curve
// max_efficiency x F / (F + half_saturation_flops) written out — fitted on log residuals.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "calibration_fit_curves.hpp"
#include "calibration_solver.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/sim/compute_cost.hpp"

namespace orrery::calibration {
namespace {

// Parameter order: the ComputeCurve's declaration order.
enum : size_t { kMaxEfficiency = 0, kHalfSaturation = 1, kMemoryEfficiency = 2, kOverhead = 3 };

template <typename T>
T log_compute_time(const ComputeSample& s, const T* v) {
  T compute(0.0), memory(0.0);
  if (s.flops > 0 && s.peak_flops_per_s > 0) {
    compute = (T(s.flops) + v[kHalfSaturation]) / (T(s.peak_flops_per_s) * v[kMaxEfficiency]);
  }
  if (s.bytes > 0) memory = T(s.bytes) / (T(s.memory_bytes_per_s) * v[kMemoryEfficiency]);
  using std::log;
  return log(v[kOverhead] + (compute > memory ? compute : memory));
}

// Corrections by shape (calibration_fit.hpp): one point per shape and pass, the clipped mean
// ratio of its samples' measured times to the fitted curve's, in (shape, pass) order. A mean,
// because the simulator adds op times and the ratios lean right (a median would price every op
// at its typical time, short of what the ops take together); clipped, so one descheduled op
// moves nothing.
void add_shape_points(pb::ComputeCurve& c, const std::vector<const ComputeSample*>& samples) {
  std::map<std::pair<std::vector<int64_t>, int>, std::vector<double>> ratios;
  for (const ComputeSample* s : samples) {
    if (s->shape.empty() ||
        std::any_of(s->shape.begin(), s->shape.end(), [](int64_t d) { return d <= 0; })) {
      continue;
    }
    const pb::Phase pass = s->phase == pb::PHASE_BACKWARD ? pb::PHASE_BACKWARD : pb::PHASE_FORWARD;
    ratios[{s->shape, pass}].push_back(s->seconds / predict_compute_seconds(c, *s));
  }
  for (const auto& [key, r] : ratios) {
    pb::ShapePoint* p = c.add_shape_points();
    for (int64_t d : key.first) p->add_shape(d);
    p->set_phase(static_cast<pb::Phase>(key.second));
    p->set_time_ratio(orrery::base::clipped_mean(r));
    p->set_samples(static_cast<int64_t>(r.size()));
  }
}

}  // namespace

double predict_compute_seconds(const pb::ComputeCurve& curve, const ComputeSample& s) {
  // The real cost model on a device that has exactly this sample's peak and bandwidth.
  pb::DeviceSpec device;
  device.set_name(s.device);
  device.mutable_peak_flops()->set_fp32(s.peak_flops_per_s);
  device.set_memory_bandwidth_bytes_per_s(s.memory_bytes_per_s);
  pb::CalibrationProfile profile;
  pb::ComputeCurve& c = *profile.add_compute();
  c = curve;
  c.set_device(s.device);
  c.set_op_class(s.op_class);
  c.clear_op();  // found as the class's curve
  return sim::ComputeCostModel("fp32", &profile).seconds(device, s.op_class, s.flops, s.bytes);
}

namespace detail {

std::optional<pb::ComputeCurve> fit_compute_curve(const std::vector<const ComputeSample*>& samples,
                                                  const pb::ComputeCurve& defaults,
                                                  CurveReport& report) {
  std::vector<double> measured, flops, times;
  double achieved_compute = 0, achieved_memory = 0, max_flops = 0;
  for (const ComputeSample* s : samples) {
    measured.push_back(s->seconds);
    if (s->flops > 0 && s->peak_flops_per_s > 0) {
      achieved_compute = std::max(achieved_compute, s->flops / (s->peak_flops_per_s * s->seconds));
      flops.push_back(s->flops);
      max_flops = std::max(max_flops, s->flops);
    }
    if (s->bytes > 0)
      achieved_memory = std::max(achieved_memory, s->bytes / (s->memory_bytes_per_s * s->seconds));
  }
  const double t_min = *std::min_element(measured.begin(), measured.end());
  // Start from the best efficiencies the samples reached (each is a lower bound of its
  // parameter) and half the shortest op as fixed cost.
  const double emax0 =
      achieved_compute > 0 ? std::clamp(achieved_compute, 1e-3, 10.0) : defaults.max_efficiency();
  const double me0 =
      achieved_memory > 0 ? std::clamp(achieved_memory, 1e-3, 1e3) : defaults.memory_efficiency();
  std::vector<SolverParam> params(4);
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // Efficiencies between 1e-4 and 100 (sanity: a fit beyond contradicts the model); the
  // additive terms from 0 up.
  params[kMaxEfficiency] = {"max_efficiency", emax0, emax0, 1e-4, 100, defaults.max_efficiency()};
  params[kHalfSaturation] = {"half_saturation_flops",
                             0,
                             flops.empty() ? 1.0 : std::max(upper_median(flops), 1.0),
                             0,
                             kNone,
                             0};
  params[kMemoryEfficiency] = {"memory_efficiency",         me0, me0, 1e-4, 1e4,
                               defaults.memory_efficiency()};
  params[kOverhead] = {"overhead_s", 0.5 * t_min,          upper_median(measured), 0,
                       kNone,        defaults.overhead_s()};
  Predictor predict;
  predict.value = [&](size_t i, const double* v) { return log_compute_time(*samples[i], v); };
  predict.jet = [&](size_t i, const Jet* v) { return log_compute_time(*samples[i], v); };
  // Given up first: half saturation (only memory-bound samples tell it from the overhead), then
  // memory efficiency, then peak efficiency.
  const std::vector<size_t> hold_order = {kHalfSaturation, kMemoryEfficiency, kMaxEfficiency,
                                          kOverhead};
  const std::vector<std::vector<double>> starts = {
      {defaults.max_efficiency(), defaults.half_saturation_flops(), defaults.memory_efficiency(),
       defaults.overhead_s()}};
  const SolveResult solved = solve_curve(predict, measured, params, hold_order, starts);
  if (!solved.contradiction.empty()) {
    report.note =
        "the samples contradict the model (" + solved.contradiction + "): the default stays";
    return std::nullopt;
  }

  pb::ComputeCurve c;
  c.set_device(defaults.device());
  c.set_op_class(defaults.op_class());
  c.set_max_efficiency(params[kMaxEfficiency].value);
  c.set_half_saturation_flops(params[kHalfSaturation].value);
  c.set_memory_efficiency(params[kMemoryEfficiency].value);
  c.set_overhead_s(params[kOverhead].value);
  std::vector<double> predicted;
  for (const ComputeSample* s : samples) predicted.push_back(predict_compute_seconds(c, *s));
  fill_error_stats(predicted, measured, *c.mutable_fit());
  for (const SolverParam& p : params) {
    if (p.free) {
      c.mutable_fit()->add_fitted_params(p.name);
      if (solved.covariance_ok) c.mutable_fit()->add_param_std_errors(p.std_error);
    } else {
      report.held.push_back({p.name, p.value, p.held_reason});
    }
  }
  if (c.fit().fitted_params_size() == 0) {
    report.note = "the samples determine none of its parameters: the default stays";
    return std::nullopt;
  }
  if (!solved.covariance_ok)
    report.note = "no standard errors: the covariance could not be computed";
  // The fit's statistics above are the curve's own; the points then absorb what it misses.
  add_shape_points(c, samples);
  return c;
}

std::optional<pb::ComputeCurve> fit_op_curve(const std::vector<const ComputeSample*>& samples,
                                             const pb::ComputeCurve& of_class,
                                             const std::string& op, pb::Phase pass,
                                             CurveReport& report) {
  enum : size_t { kScale = 0, kOwnOverhead = 1 };
  pb::ComputeCurve beyond = of_class;  // the class's time beyond its overhead, no shape points
  beyond.set_overhead_s(0);
  beyond.clear_shape_points();
  std::vector<double> measured, base, ratios;
  for (const ComputeSample* s : samples) {
    measured.push_back(s->seconds);
    base.push_back(predict_compute_seconds(beyond, *s));
    ratios.push_back(s->seconds / base.back());
  }
  const double t_min = *std::min_element(measured.begin(), measured.end());
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<SolverParam> params(2);
  // A scale above 1e3 is no longer the class's curve (sanity: the fit contradicts it); one at its
  // floor, 1e-3, is an op whose time does not grow with its size (an add's backward, which only
  // passes its gradient on): its overhead is its time.
  params[kScale] = {"time_scale", std::clamp(upper_median(ratios), 1e-3, 1e3), 1.0, 1e-3, 1e3, 1.0};
  params[kScale].natural_lower = true;
  params[kOwnOverhead] = {"overhead_s", 0.5 * t_min,          upper_median(measured), 0,
                          kNone,        of_class.overhead_s()};
  Predictor predict;
  predict.value = [&](size_t i, const double* v) {
    return std::log(v[kOwnOverhead] + v[kScale] * base[i]);
  };
  predict.jet = [&](size_t i, const Jet* v) { return log(v[kOwnOverhead] + v[kScale] * base[i]); };
  const SolveResult solved = solve_curve(predict, measured, params, {kOwnOverhead, kScale},
                                         {{1.0, of_class.overhead_s()}});
  if (!solved.contradiction.empty()) {
    report.note = "the samples contradict its class's curve (" + solved.contradiction +
                  "): the class's curve prices it";
    return std::nullopt;
  }
  if (!params[kScale].free && !params[kOwnOverhead].free) {
    report.note =
        "the samples determine neither its scale nor its overhead: the class's curve prices it";
    return std::nullopt;
  }
  const double k = params[kScale].value;
  pb::ComputeCurve c = of_class;
  c.set_op(op);
  c.set_phase(pass);
  c.clear_shape_points();
  c.clear_fit();
  c.set_max_efficiency(of_class.max_efficiency() / k);
  c.set_memory_efficiency(of_class.memory_efficiency() / k);
  for (auto& p : *c.mutable_points()) p.set_efficiency(p.efficiency() / k);
  c.set_overhead_s(params[kOwnOverhead].value);
  std::vector<double> predicted;
  for (const ComputeSample* s : samples) predicted.push_back(predict_compute_seconds(c, *s));
  fill_error_stats(predicted, measured, *c.mutable_fit());
  // The scale moves both efficiencies (their errors are relative, k's); listed as fitted are
  // those the class's samples determined (a norm's max_efficiency, held there, prices nothing
  // here either), or both when the class fitted neither. The overhead is the op's own.
  pb::FitStats& fit = *c.mutable_fit();
  if (params[kScale].free) {
    const double relative = params[kScale].std_error / k;
    const auto& by_class = of_class.fit().fitted_params();
    const auto fitted_in_class = [&](const char* name) {
      return std::find(by_class.begin(), by_class.end(), name) != by_class.end();
    };
    const bool neither =
        !fitted_in_class("max_efficiency") && !fitted_in_class("memory_efficiency");
    const std::pair<const char*, double> efficiencies[] = {
        {"max_efficiency", c.max_efficiency()}, {"memory_efficiency", c.memory_efficiency()}};
    for (const auto& [name, value] : efficiencies) {
      if (!neither && !fitted_in_class(name)) continue;
      fit.add_fitted_params(name);
      if (solved.covariance_ok) fit.add_param_std_errors(value * relative);
    }
  } else {
    report.held.push_back({"time_scale", k, params[kScale].held_reason});
  }
  if (params[kOwnOverhead].free) {
    fit.add_fitted_params("overhead_s");
    if (solved.covariance_ok) fit.add_param_std_errors(params[kOwnOverhead].std_error);
  } else {
    report.held.push_back(
        {"overhead_s", params[kOwnOverhead].value, params[kOwnOverhead].held_reason});
  }
  add_shape_points(c, samples);
  return c;
}

}  // namespace detail
}  // namespace orrery::calibration
