// fit_calibration: groups the samples into curves, fits those with enough samples, and reports
// the others as left at their defaults.
#include "orrery/sim/calibration_fit.hpp"

#include <algorithm>
#include <cmath>

#include "calibration_fit_curves.hpp"
#include "compute_defaults.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/traces/error.hpp"
#include "orrery/traces/spec_io.hpp"
#include "orrery/traces/statistics.hpp"

namespace orrery::sim {
namespace {

std::string op_class_name(pb::OpClass c) {
  return enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(c));
}

std::string collective_name(pb::CollectiveKind k) {
  return enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(k));
}

void check_sample(double seconds, const std::string& source) {
  ORRERY_CHECK(std::isfinite(seconds) && seconds > 0,
               "sample " + source + " has no positive measured time");
}

bool enough(size_t samples, const FitOptions& options, CurveReport& report) {
  report.samples = static_cast<int64_t>(samples);
  if (static_cast<int64_t>(samples) >= options.min_samples) return true;
  report.note = std::to_string(samples) + " sample(s), " + std::to_string(options.min_samples) +
                " needed: the default stays";
  return false;
}

// Linear interpolation between order statistics of `sorted` (non-empty), q in [0, 1].
double quantile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

// The overlap slowdown (calibration_fit.hpp): the median over the overlapped ops of the
// slowdown that explains each one's time beyond the fitted cost model's.
void fit_overlap_slowdown(const std::vector<const ComputeSample*>& overlapped,
                          const std::map<std::string, pb::DeviceSpec>& devices,
                          const FitOptions& options, CalibrationFit& out) {
  OverlapReport& r = out.overlap;
  r.samples = static_cast<int64_t>(overlapped.size());
  if (r.samples < std::max<int64_t>(options.min_samples, 1)) {
    r.note = std::to_string(r.samples) + " compute op(s) ran beside communication for at least " +
             std::to_string(static_cast<int>(kOverlapMeasured * 100)) + "% of their time, " +
             std::to_string(options.min_samples) + " needed: the simulator's 1 (no slowdown) stays";
    return;
  }
  std::vector<double> slowdowns;
  for (const ComputeSample* s : overlapped) {
    pb::ComputeCurve curve = detail::default_curve(devices.at(s->device), s->op_class);
    for (const auto& c : out.profile.compute()) {
      if (c.device() == s->device && c.op_class() == s->op_class) curve = c;
    }
    const double predicted = predict_compute_seconds(curve, *s) *
                             ComputeCostModel::shape_correction(curve, s->shape, s->phase);
    // Over the op's measured time m, a share f ran beside communication at 1/s speed: the work
    // done, predicted p, is (1 - f) m + f m / s, so s = f / (p / m - 1 + f). An op slower than
    // any slowdown explains (p / m <= 1 - f) is not evidence of one: it is left out.
    const double f = s->overlap, denominator = predicted / s->seconds - 1 + f;
    if (denominator > 0) slowdowns.push_back(f / denominator);
  }
  if (slowdowns.empty()) {
    r.note = "the overlapped ops ran slower than any slowdown explains: the simulator's 1 stays";
    return;
  }
  std::sort(slowdowns.begin(), slowdowns.end());
  r.slowdown = quantile(slowdowns, 0.5), r.q1 = quantile(slowdowns, 0.25), r.q3 = quantile(slowdowns, 0.75);
  if (r.slowdown < 1) {
    r.note = "overlapped compute ran no slower than the cost model predicts (median slowdown " +
             std::to_string(r.slowdown) + "): the simulator's 1 (no slowdown) stays";
    return;
  }
  r.fitted = true;
  out.profile.set_overlap_compute_slowdown(r.slowdown);
}

// A time the profile adds per event (a blocking collective, an op's dispatch): the clipped mean of
// its samples (statistics.hpp: the simulator adds one per event, so their mean is what adds up,
// and the samples lean right), with their quartiles, or in `note` why nothing is written (too few
// samples, a value at or below 0).
struct EventOverhead {
  int64_t samples = 0;
  double value = 0, q1 = 0, q3 = 0;
  std::string note;

  // Into a report (BlockingReport, DispatchReport): its spread and note; whether it is fitted.
  template <typename Report>
  bool report_to(Report& r) const {
    r.samples = samples, r.q1_s = q1, r.q3_s = q3, r.note = note, r.fitted = note.empty();
    return r.fitted;
  }
  // Into the profile's message: its spread.
  template <typename Proto>
  Proto* write_spread(Proto& p) const {
    p.set_samples(samples), p.set_q1_s(q1), p.set_q3_s(q3);
    return &p;
  }
};

EventOverhead event_overhead(std::vector<double> v, const FitOptions& options, const std::string& samples_are,
                             const std::string& when_not_positive) {
  EventOverhead m;
  m.samples = static_cast<int64_t>(v.size());
  std::sort(v.begin(), v.end());
  m.value = clipped_mean(v), m.q1 = quantile(v, 0.25), m.q3 = quantile(v, 0.75);
  if (m.samples < std::max<int64_t>(options.min_samples, 1)) {
    m.note = std::to_string(m.samples) + " " + samples_are + ", " + std::to_string(options.min_samples) +
             " needed: nothing is added";
  } else if (m.value <= 0) {
    m.note = when_not_positive + ": nothing is added";
  }
  return m;
}

// The blocking overhead of each scope (calibration_fit.hpp, BlockingReport): the clipped mean
// residual of the blocking samples over the curves fitted without them.
void fit_blocking_overheads(const std::vector<const CommSample*>& blocking, const FitOptions& options,
                            CalibrationFit& out) {
  std::map<std::string, std::vector<double>> residuals;
  for (const CommSample* s : blocking) {
    for (const auto& c : out.profile.comm()) {
      if (c.scope() == s->scope && c.collective() == s->collective)
        residuals[s->scope].push_back(s->seconds - predict_comm_seconds(c, *s));
    }
  }
  for (auto& [scope, r] : residuals) {
    BlockingReport b;
    b.scope = scope;
    const EventOverhead m = event_overhead(std::move(r), options, "blocking collective(s)",
                                             "collectives issued in line with compute took no longer than back to back");
    b.overhead_s = m.value;
    if (m.report_to(b)) {
      pb::BlockingOverhead* o = m.write_spread(*out.profile.add_blocking_overhead());
      o->set_scope(scope);
      o->set_overhead_s(m.value);
    }
    out.blocking.push_back(std::move(b));
  }
}

}  // namespace

namespace detail {

void fill_error_stats(const std::vector<double>& predicted, const std::vector<double>& measured,
                      pb::FitStats& fit) {
  std::vector<double> errors;
  for (size_t i = 0; i < measured.size(); ++i)
    errors.push_back(std::abs(predicted[i] / measured[i] - 1));
  std::sort(errors.begin(), errors.end());
  fit.set_samples(static_cast<int64_t>(errors.size()));
  const size_t n = errors.size();
  fit.set_median_abs_rel_error(n % 2 == 1 ? errors[n / 2]
                                          : 0.5 * (errors[n / 2 - 1] + errors[n / 2]));
  fit.set_max_abs_rel_error(errors.back());
}

}  // namespace detail

CalibrationFit fit_calibration(const std::vector<ComputeSample>& compute,
                               const std::vector<CommSample>& comm,
                               const std::map<std::string, pb::DeviceSpec>& devices,
                               const FitOptions& options) {
  CalibrationFit out;
  std::vector<CurveReport> defaults_kept;

  std::map<std::pair<std::string, int>, std::vector<const ComputeSample*>> by_curve;
  std::vector<const ComputeSample*> overlapped;
  for (const ComputeSample& s : compute) {
    check_sample(s.seconds, s.source);
    ORRERY_CHECK(devices.count(s.device),
                 "sample " + s.source + " names device " + s.device + " without its spec");
    // Ops beside in-flight communication measure the slowdown, not the curve; partly overlapped
    // ones neither (too little of their time tells the slowdown).
    if (s.overlap >= kOverlapMeasured) {
      overlapped.push_back(&s);
    } else if (s.overlap <= 0) {
      by_curve[{s.device, s.op_class}].push_back(&s);
    }
  }
  for (const auto& [key, samples] : by_curve) {
    CurveReport report;
    report.device_or_scope = key.first;
    report.what = op_class_name(static_cast<pb::OpClass>(key.second));
    if (!enough(samples.size(), options, report)) {
      defaults_kept.push_back(report);
      continue;
    }
    const pb::ComputeCurve defaults =
        detail::default_curve(devices.at(key.first), static_cast<pb::OpClass>(key.second));
    if (auto curve = detail::fit_compute_curve(samples, defaults, report)) {
      *out.profile.add_compute() = std::move(*curve);
      report.fitted = true;
      out.curves.push_back(report);
    } else {
      defaults_kept.push_back(report);
    }
  }

  // A kind's curve comes from its back-to-back and communication-stream samples when there are
  // enough of them; its blocking samples then measure the blocking overhead. Otherwise the curve
  // takes all of them (and the overhead none).
  std::map<std::pair<std::string, int>, std::vector<const CommSample*>> by_comm, blocking_by_comm;
  for (const CommSample& s : comm) {
    check_sample(s.seconds, s.source);
    ORRERY_CHECK(s.bytes > 0 && s.ranks > 1,
                 "sample " + s.source + " moves no bytes between ranks");
    (s.blocking ? blocking_by_comm : by_comm)[{s.scope, s.collective}].push_back(&s);
  }
  std::vector<const CommSample*> blocking;
  for (auto& [key, samples] : blocking_by_comm) {
    auto& own = by_comm[key];
    if (static_cast<int64_t>(own.size()) >= options.min_samples) {
      blocking.insert(blocking.end(), samples.begin(), samples.end());
    } else {
      own.insert(own.end(), samples.begin(), samples.end());
    }
  }
  for (const auto& [key, samples] : by_comm) {
    CurveReport report;
    report.device_or_scope = key.first;
    report.what = collective_name(static_cast<pb::CollectiveKind>(key.second));
    if (!enough(samples.size(), options, report)) {
      defaults_kept.push_back(report);
      continue;
    }
    if (auto curve = detail::fit_comm_curve(samples, report)) {
      *out.profile.add_comm() = std::move(*curve);
      report.fitted = true;
      out.curves.push_back(report);
    } else {
      defaults_kept.push_back(report);
    }
  }
  out.curves.insert(out.curves.end(), defaults_kept.begin(), defaults_kept.end());
  fit_overlap_slowdown(overlapped, devices, options, out);
  fit_blocking_overheads(blocking, options, out);
  return out;
}

void fit_dispatch_overheads(const std::vector<DispatchSample>& samples, const FitOptions& options,
                            CalibrationFit& fit) {
  std::map<std::string, std::vector<double>> by_device;
  for (const DispatchSample& s : samples) {
    ORRERY_CHECK(std::isfinite(s.per_op_s) && s.per_op_s >= 0,
                 "dispatch sample " + s.source + " has no valid time");
    by_device[s.device].push_back(s.per_op_s);
  }
  for (auto& [device, v] : by_device) {
    DispatchReport d;
    d.device = device;
    const EventOverhead m = event_overhead(std::move(v), options, "rank(s) measured their untimed time",
                                             "no time between ops");
    d.per_op_s = m.value;
    if (m.report_to(d)) {
      pb::DispatchOverhead* o = m.write_spread(*fit.profile.add_dispatch_overhead());
      o->set_device(device);
      o->set_per_op_s(m.value);
    }
    fit.dispatch.push_back(std::move(d));
  }
}

}  // namespace orrery::sim
