// fit_calibration: groups the samples into curves, fits those with enough samples, and reports
// the others as left at their defaults.
#include "orrery/calibration/calibration_fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "calibration_fit_curves.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/sim/compute_defaults.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::calibration {
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

// Whether `samples` moved sizes within detail::kP2pSizeSpread of each other.
bool one_size(const std::vector<const CommSample*>& samples) {
  const auto [lo, hi] = std::minmax_element(
      samples.begin(), samples.end(),
      [](const CommSample* a, const CommSample* b) { return a->bytes < b->bytes; });
  return (*hi)->bytes < detail::kP2pSizeSpread * (*lo)->bytes;
}

// The bandwidth a point-to-point curve of `scope` holds when its transfers moved one size, and
// the collective it comes from: the scope's fitted all-to-all (on two ranks, a transfer each
// way), else all-gather, reduce-scatter, all-reduce (their bus bandwidth is a link's).
std::optional<std::pair<double, std::string>> bandwidth_to_borrow(
    const pb::CalibrationProfile& profile, const std::string& scope) {
  for (const auto kind : {pb::COLLECTIVE_KIND_ALL_TO_ALL, pb::COLLECTIVE_KIND_ALL_GATHER,
                          pb::COLLECTIVE_KIND_REDUCE_SCATTER, pb::COLLECTIVE_KIND_ALL_REDUCE}) {
    if (const pb::CommCurve* c = sim::CollectiveCostModel::calibrated_curve(profile, scope, kind))
      return std::make_pair(c->bandwidth_bytes_per_s(), collective_name(kind));
  }
  return std::nullopt;
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

// Ranks sharing a host (pb::HostSharing), per device: the op keys (class, op, shape, pass) measured
// outside communication both alone (one rank on the host) and with k ranks on it (the k > 1 most
// samples have); the slowdown is the median over the keys of the ratio of their clipped mean
// times. Every sample of a rank that shared its host is then divided by its factor, so that what
// is fitted next describes a rank computing alone there. A median above 1 is written; one below 1
// (a rank alone ran slower, as a virtual machine's lone busy vCPU can) only when three quarters of
// the keys say so (their third quartile below 1); otherwise nothing.
void fit_host_sharing(std::vector<ComputeSample>& samples, const FitOptions& options,
                      CalibrationFit& out) {
  std::map<std::string, std::map<int64_t, int64_t>> shared_ranks;  // device -> k -> samples
  for (const ComputeSample& s : samples) {
    if (s.host_ranks > 1) ++shared_ranks[s.device][s.host_ranks];
  }
  for (const auto& [device, counts] : shared_ranks) {
    SharingReport r;
    r.device = device;
    r.ranks = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                return a.second < b.second;
              })->first;
    using Key = std::tuple<int, std::string, std::vector<int64_t>, int>;
    std::map<Key, std::pair<std::vector<double>, std::vector<double>>> times;  // alone, shared
    for (const ComputeSample& s : samples) {
      if (s.device != device || s.overlap > 0 || s.shape.empty()) continue;
      if (s.host_ranks != 1 && s.host_ranks != r.ranks) continue;
      auto& t = times[{s.op_class, s.op, s.shape, s.phase}];
      (s.host_ranks == 1 ? t.first : t.second).push_back(s.seconds);
    }
    std::vector<double> ratios;
    for (const auto& [key, t] : times) {
      if (t.first.size() >= 2 && t.second.size() >= 2)
        ratios.push_back(base::clipped_mean(t.second) / base::clipped_mean(t.first));
    }
    r.shapes = static_cast<int64_t>(ratios.size());
    std::sort(ratios.begin(), ratios.end());
    if (!ratios.empty())
      r.slowdown = quantile(ratios, 0.5), r.q1 = quantile(ratios, 0.25),
      r.q3 = quantile(ratios, 0.75);
    if (r.shapes < std::max<int64_t>(options.min_samples, 1)) {
      r.note = std::to_string(r.shapes) + " op shape(s) measured both alone and with " +
               std::to_string(r.ranks) + " ranks on the host, " +
               std::to_string(options.min_samples) + " needed: sharing is taken to cost nothing";
      r.slowdown = 1;
    } else if (r.slowdown == 1 || (r.slowdown < 1 && r.q3 >= 1)) {
      std::ostringstream ratio;
      ratio << std::setprecision(3) << r.slowdown << ", third quartile " << r.q3;
      r.note = "ops were no slower with " + std::to_string(r.ranks) +
               " ranks on the host, nor faster for three " +
               "quarters of the shapes (median ratio " + ratio.str() +
               "): sharing is taken to cost nothing";
    } else {
      r.fitted = true;
      auto* h = out.profile.add_host_sharing();
      h->set_device(device), h->set_slowdown(r.slowdown), h->set_ranks(r.ranks),
          h->set_shapes(r.shapes);
      h->set_q1(r.q1), h->set_q3(r.q3);
      for (ComputeSample& s : samples) {
        if (s.device == device && s.host_ranks > 1)
          s.seconds /= sim::host_sharing_factor(*h, s.host_ranks);
      }
    }
    out.sharing.push_back(std::move(r));
  }
}

// The median, with its quartiles, of the per-sample slowdowns into `r`; true when it is a
// slowdown (at least 1), else `r.note` says why none is written.
bool median_slowdown(std::vector<double> slowdowns, const std::string& what,
                     const std::string& runs, OverlapReport& r) {
  if (slowdowns.empty()) {
    r.note = "the overlapped " + what +
             " ran slower than any slowdown explains: the simulator's 1 stays";
    return false;
  }
  std::sort(slowdowns.begin(), slowdowns.end());
  r.slowdown = quantile(slowdowns, 0.5), r.q1 = quantile(slowdowns, 0.25),
  r.q3 = quantile(slowdowns, 0.75);
  if (r.slowdown < 1) {
    std::ostringstream median;
    median << std::setprecision(3) << r.slowdown;
    r.note = "overlapped " + runs +
             " ran no slower than the cost model predicts (median slowdown " + median.str() +
             "): the simulator's 1 (no slowdown) stays";
    return false;
  }
  r.fitted = true;
  return true;
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
    const pb::ComputeCurve* fitted = sim::ComputeCostModel::calibrated_curve(
        out.profile, s->device, s->op_class, s->op, s->phase);
    const pb::ComputeCurve curve =
        fitted != nullptr ? *fitted
                          : sim::detail::default_curve(devices.at(s->device), s->op_class);
    const double predicted = predict_compute_seconds(curve, *s) *
                             sim::ComputeCostModel::shape_correction(curve, s->shape, s->phase);
    // Over the op's measured time m, a share f ran beside communication at 1/s speed: the work
    // done, predicted p, is (1 - f) m + f m / s, so s = f / (p / m - 1 + f). An op slower than
    // any slowdown explains (p / m <= 1 - f) is not evidence of one: it is left out.
    const double f = s->overlap, denominator = predicted / s->seconds - 1 + f;
    if (denominator > 0) slowdowns.push_back(f / denominator);
  }
  if (median_slowdown(std::move(slowdowns), "ops", "compute", r))
    out.profile.set_overlap_compute_slowdown(r.slowdown);
}

// Per subject (a scope, a device), a time the profile adds per event (a blocking collective, an
// op's dispatch): the clipped mean of its samples (statistics.hpp: the simulator adds one per
// event, so their mean is what adds up, and the samples lean right), with their quartiles, or in
// `note` why nothing is written (too few samples, a value at or below 0). `write(subject,
// report)` adds a fitted one to the profile.
template <typename Write>
std::vector<OverheadReport> fit_overheads(std::map<std::string, std::vector<double>> by_subject,
                                          const FitOptions& options, const std::string& samples_are,
                                          const std::string& when_not_positive, Write write) {
  std::vector<OverheadReport> out;
  for (auto& [subject, v] : by_subject) {
    OverheadReport r;
    r.subject = subject;
    r.samples = static_cast<int64_t>(v.size());
    std::sort(v.begin(), v.end());
    r.value_s = base::clipped_mean(v), r.q1_s = quantile(v, 0.25), r.q3_s = quantile(v, 0.75);
    if (r.samples < std::max<int64_t>(options.min_samples, 1)) {
      r.note = std::to_string(r.samples) + " " + samples_are + ", " +
               std::to_string(options.min_samples) + " needed: nothing is added";
    } else if (r.value_s <= 0) {
      r.note = when_not_positive + ": nothing is added";
    } else {
      r.fitted = true;
      write(subject, r);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// A fitted overhead's spread, as every overhead message carries it.
template <typename Proto>
Proto* with_spread(Proto* p, const OverheadReport& r) {
  p->set_samples(r.samples), p->set_q1_s(r.q1_s), p->set_q3_s(r.q3_s);
  return p;
}

// A scope's blocking overhead split into a part per collective and a part per message round
// (calibration_fit.hpp), from its residuals (message rounds, seconds) when they were measured at
// two round counts or more; `split` false otherwise.
struct BlockingSplit {
  bool split = false;
  double per_collective_s = 0, per_round_s = 0;
};
BlockingSplit split_blocking(const std::vector<std::pair<double, double>>& residuals) {
  std::map<double, std::vector<double>> by_rounds;
  for (const auto& [rounds, seconds] : residuals) by_rounds[rounds].push_back(seconds);
  if (by_rounds.size() < 2) return {};
  // The line m = c + p k through the clipped means m_k at each round count k, by least squares
  // weighted by their sample counts, with c and p at least 0 (each refit alone when the other
  // would fall below).
  double sw = 0, sk = 0, sm = 0, skk = 0, skm = 0;
  for (const auto& [k, v] : by_rounds) {
    const double w = static_cast<double>(v.size()), m = base::clipped_mean(v);
    sw += w, sk += w * k, sm += w * m, skk += w * k * k, skm += w * k * m;
  }
  BlockingSplit out;
  out.split = true;
  out.per_round_s = (sw * skm - sk * sm) / (sw * skk - sk * sk);
  out.per_collective_s = (sm - out.per_round_s * sk) / sw;
  if (out.per_round_s < 0) {
    out.per_round_s = 0, out.per_collective_s = sm / sw;
  } else if (out.per_collective_s < 0) {
    out.per_collective_s = 0, out.per_round_s = skm / skk;
  }
  out.per_collective_s = std::max(0.0, out.per_collective_s),
  out.per_round_s = std::max(0.0, out.per_round_s);
  return out;
}

// The blocking overhead of each scope (calibration_fit.hpp): from the residuals of the blocking
// samples over the curves fitted without them, a part per collective and a part per message
// round where they were measured at two round counts or more, else all of it per round.
void fit_blocking_overheads(const std::vector<const CommSample*>& blocking,
                            const FitOptions& options, CalibrationFit& out) {
  std::map<std::string, std::vector<double>> per_round;
  std::map<std::string, std::vector<std::pair<double, double>>> residuals;  // (rounds, seconds)
  for (const CommSample* s : blocking) {
    const double rounds = static_cast<double>(sim::message_rounds(s->collective, s->ranks));
    if (rounds <= 0) continue;
    if (const pb::CommCurve* c =
            sim::CollectiveCostModel::calibrated_curve(out.profile, s->scope, s->collective)) {
      const double residual = s->seconds - predict_comm_seconds(*c, *s);
      per_round[s->scope].push_back(residual / rounds);
      residuals[s->scope].emplace_back(rounds, residual);
    }
  }
  out.blocking =
      fit_overheads(std::move(per_round), options, "blocking collective(s)",
                    "collectives issued in line with compute took no longer than back to back",
                    [&](const std::string& scope, OverheadReport& r) {
                      auto* o = with_spread(out.profile.add_blocking_overhead(), r);
                      o->set_scope(scope);
                      const BlockingSplit split = split_blocking(residuals.at(scope));
                      if (split.split) {
                        r.value_s = split.per_round_s, r.per_collective_s = split.per_collective_s;
                        r.split = true;
                        o->set_overhead_s(split.per_collective_s);
                      }
                      o->set_per_round_s(r.value_s);
                    });
}

// Curves per op (ComputeCurve.op, .phase): within a class of several ops and passes, each op's
// pass measured at two sizes or more (distinct work) in at least min_samples samples gets its own
// curve, the class's fitted curve scaled, with an overhead of its own (detail::fit_op_curve). An
// op's pass that cannot be fitted keeps the class's curve.
void fit_op_curves(const std::vector<const ComputeSample*>& samples,
                   const pb::ComputeCurve& of_class, const FitOptions& options,
                   CalibrationFit& out) {
  std::map<std::pair<std::string, int>, std::vector<const ComputeSample*>> by_op;
  for (const ComputeSample* s : samples) {
    if (!s->op.empty()) by_op[{s->op, sim::ComputeCostModel::pass_of(s->phase)}].push_back(s);
  }
  if (by_op.size() < 2) return;  // one op in one pass: the class's curve is its curve
  for (const auto& [key, own] : by_op) {
    std::set<std::pair<double, double>> sizes;
    for (const ComputeSample* s : own) sizes.emplace(s->flops, s->bytes);
    if (sizes.size() < 2 || static_cast<int64_t>(own.size()) < options.min_samples) continue;
    const auto pass = static_cast<pb::Phase>(key.second);
    CurveReport report;
    report.device_or_scope = of_class.device();
    report.what = op_class_name(of_class.op_class());
    report.op = key.first + (pass == pb::PHASE_BACKWARD ? " backward" : " forward");
    report.samples = static_cast<int64_t>(own.size());
    if (auto curve = detail::fit_op_curve(own, of_class, key.first, pass, report)) {
      *out.profile.add_compute() = std::move(*curve);
      report.fitted = true;
    }
    out.op_curves.push_back(std::move(report));
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

  std::vector<ComputeSample> alone = compute;  // shared hosts' samples divided by their slowdown
  fit_host_sharing(alone, options, out);
  std::map<std::pair<std::string, int>, std::vector<const ComputeSample*>> by_curve;
  std::vector<const ComputeSample*> overlapped;
  for (const ComputeSample& s : alone) {
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
        sim::detail::default_curve(devices.at(key.first), static_cast<pb::OpClass>(key.second));
    if (auto curve = detail::fit_compute_curve(samples, defaults, report)) {
      report.fitted = true;
      out.curves.push_back(report);
      *out.profile.add_compute() = *curve;
      fit_op_curves(samples, *curve, options, out);
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
  // Point-to-point transfers (no collective kind) after the collectives: at one message size
  // they take their bandwidth from the same scope's fitted collectives (fit_p2p_latency).
  for (const bool p2p : {false, true}) {
    for (const auto& [key, samples] : by_comm) {
      if ((key.second == pb::COLLECTIVE_KIND_UNSPECIFIED) != p2p) continue;
      CurveReport report;
      report.device_or_scope = key.first;
      report.what =
          p2p ? "send/recv" : collective_name(static_cast<pb::CollectiveKind>(key.second));
      if (!enough(samples.size(), options, report)) {
        defaults_kept.push_back(report);
        continue;
      }
      std::optional<pb::CommCurve> curve;
      if (p2p && one_size(samples)) {
        if (const auto from = bandwidth_to_borrow(out.profile, key.first)) {
          curve = detail::fit_p2p_latency(samples, from->first, from->second, report);
        } else {
          report.note =
              "the transfers moved one size, and no collective of this scope was fitted to take a "
              "bandwidth from: the default stays";
        }
      } else {
        curve = detail::fit_comm_curve(samples, report);
      }
      if (curve) {
        *out.profile.add_comm() = std::move(*curve);
        report.fitted = true;
        out.curves.push_back(report);
      } else {
        defaults_kept.push_back(report);
      }
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
  fit.dispatch =
      fit_overheads(std::move(by_device), options, "rank(s) measured their untimed time",
                    "no time between ops", [&](const std::string& device, const OverheadReport& r) {
                      auto* o = with_spread(fit.profile.add_dispatch_overhead(), r);
                      o->set_device(device);
                      o->set_per_op_s(r.value_s);
                    });
}

void fit_overlap_comm_slowdown(const std::vector<OverlappedCommSample>& samples,
                               const FitOptions& options, CalibrationFit& fit) {
  OverlapReport& r = fit.overlap_comm;
  r.samples = static_cast<int64_t>(samples.size());
  std::vector<double> slowdowns;
  int64_t no_curve = 0;
  for (const OverlappedCommSample& s : samples) {
    check_sample(s.seconds, s.source);
    ORRERY_CHECK(s.overlap >= kOverlapMeasured && s.overlap <= 1 && !s.collectives.empty(),
                 "sample " + s.source + " is not communication beside compute");
    double predicted = 0;
    for (const CommSample& c : s.collectives) {
      const pb::CommCurve* curve =
          sim::CollectiveCostModel::calibrated_curve(fit.profile, c.scope, c.collective);
      if (curve == nullptr) {
        predicted = -1;
        break;
      }
      predicted += predict_comm_seconds(*curve, c);
    }
    if (predicted < 0) {
      ++no_curve;
      continue;
    }
    // As for compute: a share f of the measured time m ran at 1/s speed, and the work done is
    // what the curves predict for the collectives.
    const double f = s.overlap, denominator = predicted / s.seconds - 1 + f;
    if (denominator > 0) slowdowns.push_back(f / denominator);
  }
  const int64_t usable = r.samples - no_curve;
  if (usable < std::max<int64_t>(options.min_samples, 1)) {
    r.note = std::to_string(usable) + " stretch(es) of communication beside compute for at least " +
             std::to_string(static_cast<int>(kOverlapMeasured * 100)) + "% of their time" +
             (no_curve > 0 ? " (and " + std::to_string(no_curve) +
                                 " with a collective of a kind without a fitted curve)"
                           : "") +
             ", " + std::to_string(options.min_samples) +
             " needed: the simulator's 1 (no slowdown) stays";
    return;
  }
  if (median_slowdown(std::move(slowdowns), "communication", "communication", r))
    fit.profile.set_overlap_comm_slowdown(r.slowdown);
}

namespace {

// The rank skew's two parameters by least squares over a device's samples after compute,
// wait_i = e_i (jitter + cv C_i) (e_i: expected_max_of_normals of the group, C_i: the compute
// since the group last waited); `fitted` false when the jitter does not stand out of its
// standard error twice over, or either parameter would be negative.
struct SkewLine {
  bool fitted = false;
  double jitter_s = 0, cv = 0;
};
SkewLine fit_skew_line(const std::vector<std::array<double, 3>>& points) {  // (e, e C, wait)
  const auto n = static_cast<double>(points.size());
  if (n < 3) return {};
  double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
  for (const auto& [x1, x2, y] : points)
    s11 += x1 * x1, s12 += x1 * x2, s22 += x2 * x2, s1y += x1 * y, s2y += x2 * y;
  const double det = s11 * s22 - s12 * s12;
  if (!(det > 1e-12 * s11 * s22)) return {};  // every sample after the same compute
  SkewLine line;
  line.jitter_s = (s22 * s1y - s12 * s2y) / det;
  line.cv = (s11 * s2y - s12 * s1y) / det;
  if (line.jitter_s <= 0 || line.cv < 0) return {};
  double rss = 0;
  for (const auto& [x1, x2, y] : points) rss += std::pow(y - line.jitter_s * x1 - line.cv * x2, 2);
  const double jitter_se = std::sqrt(rss / (n - 2) * s22 / det);
  line.fitted = line.jitter_s > 2 * jitter_se;
  return line;
}

}  // namespace

void fit_rank_skew(const std::vector<SkewSample>& samples, const FitOptions& options,
                   CalibrationFit& fit) {
  struct Sums {
    double wait = 0, expected = 0;  // sum of waits; of compute x expected_max_of_normals(ranks)
    std::vector<double> own;        // each sample's own cv
    std::vector<std::array<double, 3>> points;  // after compute: (e, e x compute, wait)
    int64_t samples = 0;
  };
  std::map<std::string, Sums> by_device;
  std::map<int64_t, double> factor;  // expected_max_of_normals by group size
  for (const SkewSample& s : samples) {
    ORRERY_CHECK(std::isfinite(s.wait_s) && s.wait_s >= 0 && std::isfinite(s.compute_s) &&
                     s.compute_s >= 0 && s.ranks > 1,
                 "skew sample " + s.source + " has no valid wait, compute or group");
    if (factor.count(s.ranks) == 0) factor[s.ranks] = base::expected_max_of_normals(s.ranks);
    Sums& d = by_device[s.device];
    const double expected = s.compute_s * factor[s.ranks];
    d.wait += s.wait_s, d.expected += expected, ++d.samples;
    if (expected > 0) {
      d.own.push_back(s.wait_s / expected);
      d.points.push_back({factor[s.ranks], expected, s.wait_s});
    }
  }
  for (auto& [device, d] : by_device) {
    SkewReport r;
    r.device = device;
    r.samples = d.samples;
    std::sort(d.own.begin(), d.own.end());
    if (!d.own.empty()) r.q1 = quantile(d.own, 0.25), r.q3 = quantile(d.own, 0.75);
    if (d.samples < std::max<int64_t>(options.min_samples, 1)) {
      r.note = std::to_string(d.samples) + " collective(s) measured on several ranks, " +
               std::to_string(options.min_samples) + " needed: ranks are taken to arrive together";
    } else if (d.expected <= 0) {
      r.note = "no collective came after compute: ranks are taken to arrive together";
    } else if (d.wait <= 0) {
      r.note = "no member ever waited for another: ranks are taken to arrive together";
    } else {
      const SkewLine line = fit_skew_line(d.points);
      if (line.fitted) {
        r.jitter_s = line.jitter_s, r.cv = line.cv;
      } else {
        r.cv = d.wait / d.expected;
      }
      r.fitted = true;
      auto* k = fit.profile.add_rank_skew();
      k->set_device(device), k->set_cv(r.cv), k->set_samples(r.samples), k->set_q1(r.q1),
          k->set_q3(r.q3);
      k->set_jitter_s(r.jitter_s);
    }
    fit.skew.push_back(std::move(r));
  }
}

}  // namespace orrery::calibration
