// Fitting the simulator's own cost formulas to measured op times (`orrery calibrate`): per
// (device, op class) the ComputeCurve parameters of compute_cost.hpp, per (scope, collective)
// the CommCurve alpha-beta of collective_cost.hpp. Nonlinear least squares (Ceres) on
// log(predicted / measured), so a 10 us op weighs as much as a 10 ms one.
//
// Parameters the samples cannot tell apart are held, not guessed: on a curve whose samples are
// all compute-bound, half_saturation_flops and overhead_s add the same constant to every
// prediction, so half_saturation_flops is held at 0 and the constant is overhead_s; without
// memory-bound samples memory_efficiency keeps its default; one message size cannot separate
// latency from bandwidth, so latency_s is held at 0. What was held, and why, is in the report
// and in FitStats.fitted_params. A curve whose samples contradict the formula (an efficiency or
// a bandwidth running off to its sanity bound: the time does not grow with the work) is not
// written, and the default stays. Deterministic: the same samples give the same bytes.
//
// Every fitted curve then gets corrections by shape (ComputeCurve.shape_points): per op shape
// (GEMM [m, n, k], attention [b, h, q, kv, d], [elements] ...) and pass (forward, backward), the
// clipped mean (orrery::clipped_mean) of measured time / the curve's time over the samples of
// that shape, so that what one saturation curve per class misses (skinny or transposed backward
// GEMMs, an elementwise op whose backward is a pass-through) is priced as measured, and shapes
// near them by interpolation (ComputeCostModel::shape_correction). Means, not medians, wherever
// the simulator adds one value per op or event: it then adds what the ops took together.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::calibration {

// One measured compute op, with what ComputeCostModel::seconds needs to predict it.
struct ComputeSample {
  std::string device;  // DeviceSpec name
  pb::OpClass op_class = pb::OP_CLASS_UNSPECIFIED;
  std::string op;  // ExecNode.op ("attn.rope"); may be empty
  double flops = 0;
  double bytes = 0;               // read + written
  double peak_flops_per_s = 0;    // the device's peak for the op's dtype (fp32 when it has none)
  double memory_bytes_per_s = 0;  // the device's memory bandwidth
  double seconds = 0;             // measured, > 0
  std::string source;             // "file: node name", for reports
  std::vector<int64_t> shape;     // ExecNode.shape (GEMM: [m, n, k]); may be empty
  pb::Phase phase = pb::PHASE_UNSPECIFIED;
  // Fraction of its duration during which a collective of its rank on a communication stream
  // (gradient reduction, parameter gathers) was in flight: such samples measure the overlap
  // slowdown, not the curve.
  double overlap = 0;
  // Ranks of the sample's job computing on its host (1: alone, as `orrery bench`'s ops); 0 when
  // the trace does not say (an imported profiler trace): then it is neither compared nor scaled
  // for host sharing.
  int64_t host_ranks = 0;
};

// One measured collective, with what CollectiveCostModel needs to predict it from a CommCurve; or
// one point-to-point transfer (collective unspecified, ranks 2: a pipeline receive, see
// calibration_samples.hpp), predicted by the scope's CommCurve without a collective.
struct CommSample {
  std::string scope;  // CollectiveCostModel::calibration_scope of its group
  pb::CollectiveKind collective = pb::COLLECTIVE_KIND_UNSPECIFIED;
  double bytes = 0;   // nccl-tests buffer size
  int64_t ranks = 0;  // group size
  double seconds = 0;
  std::string source;
  // Issued in line with compute (ExecNode.stream is the compute stream: Megatron's TP/EP
  // collectives), not back to back (bench) nor on a communication stream. Such samples measure
  // the blocking overhead on top of the curve, not the curve (see OverheadReport).
  bool blocking = false;
  // Run back to back by `orrery bench`: a sample of the curve only. The others (a training run's
  // collectives that ran alone) also give the curve its corrections by message size.
  bool back_to_back = false;
};

// A stretch of time during which one rank always had some collective of one communication stream
// in flight, and computed beside them for at least kOverlapMeasured of it: a sample of the
// communication slowdown beside compute. A stretch, not a collective, because a CPU rank's Gloo
// runs the collectives it has been given side by side on its threads (the ZeRO gathers launched
// together end close together), so no one of them has a time of its own; their work, the sum of
// their curves' times, took the stretch.
struct OverlappedCommSample {
  std::vector<CommSample>
      collectives;     // those in flight during the stretch (their `seconds` unused)
  double seconds = 0;  // the stretch's length
  double overlap = 0;  // the share of it during which the rank computed
  std::string source;  // "file: rank r, first node name"
};

// One rank of a measured run: its time per step that no op covers, per op it issued on its
// compute stream (RankGraph.untimed_s / those ops).
struct DispatchSample {
  std::string device;  // DeviceSpec name
  double per_op_s = 0;
  std::string source;  // "file: rank 0"
};

// One collective instance of a measured run, for the rank skew: how long its members waited for
// the last of them (the mean over the members of their time beyond the fastest member's), and
// the compute each ran since it last waited on the group (their mean).
struct SkewSample {
  std::string device;  // DeviceSpec name (all members ran on it)
  int64_t ranks = 0;   // the group's size
  double wait_s = 0;
  double compute_s = 0;
  std::string source;  // "file: node name"
};

struct FitOptions {
  // A curve needs this many samples (and at least one more than the parameters it fits);
  // with fewer the simulator's default stays.
  int64_t min_samples = 3;
};

// A parameter the samples could not determine, and the value it keeps.
struct HeldParam {
  std::string name;  // as the proto field
  double value = 0;  // in the field's SI unit
  std::string reason;
};

// How one curve came out, for the report.
struct CurveReport {
  std::string device_or_scope;
  std::string what;  // op class or collective ("gemm", "all_reduce")
  std::string op;    // a curve per op (ComputeCurve.op, .phase): the op and its pass ("attn.rope
                     // forward"); else empty
  int64_t samples = 0;
  bool fitted = false;  // false: the default stays (see note)
  std::vector<HeldParam> held;
  std::string note;
};

// The overlap slowdown (CalibrationProfile.overlap_compute_slowdown): compute ops that ran at
// least kOverlapMeasured of their time beside in-flight communication, each giving
// s_i = overlap / (predicted / measured - 1 + overlap) (a share `overlap` of the measured time
// ran at 1/s speed) with `predicted` from the fitted curves (with their shape corrections); the
// slowdown is the median s_i. Ops overlapped less than that, but at all, are left out of both
// the curves and the slowdown.
inline constexpr double kOverlapMeasured = 0.5;

//
// The communication slowdown beside compute (CalibrationProfile.overlap_comm_slowdown), its
// mirror image: each OverlappedCommSample gives s_i = overlap / (predicted / measured - 1 +
// overlap) with `predicted` the sum of the fitted CommCurves' times of its collectives (a
// sample with a collective of a kind without a fitted curve is left out); the slowdown is the
// median s_i.
struct OverlapReport {
  int64_t samples = 0;    // ops (stretches of communication) overlapped >= kOverlapMeasured
  double slowdown = 0;    // written to the profile when fitted
  double q1 = 0, q3 = 0;  // quartiles of the per-op s_i
  bool fitted = false;
  std::string note;  // why not fitted
};

// A time the profile adds per event, for one subject, for the report: the clipped mean of its
// samples (orrery::clipped_mean; written when fitted) and their quartiles.
//
// The blocking overhead of one scope (CalibrationProfile.blocking_overhead): each blocking sample
// whose collective kind has a curve fitted from non-blocking samples gives its residual
// r_i = measured - curve, at k_i = message_rounds(kind, ranks). Measured at one round count
// only, the overhead is all per round: the clipped mean of r_i / k_i (per_round_s, at least 0).
// Measured at two or more (all-reduce against all-gather, or `orrery bench`'s in-line
// collectives of every kind), it is split: overhead_s + per_round_s x k is the line through the
// clipped means of r_i at each round count, weighted least squares with both parts at least 0.
// The quartiles are those of r_i / k_i either way. A kind with too few non-blocking samples for
// its own curve fits it from all its samples instead, blocking ones included, and gives no
// residuals.
//
// The dispatch overhead of one device (CalibrationProfile.dispatch_overhead): the clipped mean
// of its samples' per-op untimed time.
struct OverheadReport {
  std::string subject;  // the scope (blocking) or the device (dispatch)
  int64_t samples = 0;  // residuals (blocking), ranks (dispatch)
  double value_s = 0;   // per round (blocking), per op (dispatch)
  double q1_s = 0, q3_s = 0;
  bool fitted = false;
  // Blocking, measured at two round counts or more: the part per collective, and value_s the
  // part per round.
  bool split = false;
  double per_collective_s = 0;
  std::string note;  // why not fitted
};

// The rank skew of one device (CalibrationProfile.rank_skew). The engines wait
// (jitter + cv x compute) x expected_max_of_normals(ranks) at a collective after compute. Both are
// fitted by least squares over the samples after compute when the jitter stands out of its
// standard error twice over (collectives after short and long compute alike: a jitter that
// compute does not explain); otherwise jitter 0 and the cv that makes the engines' waits add up
// to the measured ones (sum of waits / sum of compute x that factor). The quartiles are those of
// the samples' own cv (those after some compute).
struct SkewReport {
  std::string device;
  int64_t samples = 0;
  double cv = 0;
  double jitter_s = 0;
  double q1 = 0, q3 = 0;
  bool fitted = false;
  std::string note;  // why not fitted
};

// Ranks sharing a host (pb::HostSharing), per device.
struct SharingReport {
  std::string device;
  int64_t ranks = 0;   // ranks per host compared with one
  int64_t shapes = 0;  // op shapes measured both ways
  double slowdown = 1;
  double q1 = 0, q3 = 0;
  bool fitted = false;
  std::string note;  // why not fitted
};

struct CalibrationFit {
  // Fitted curves only, compute sorted by (device, op class), each class's curve followed by its
  // curves per op (by op); comm by (scope, collective).
  pb::CalibrationProfile profile;
  std::vector<CurveReport>
      curves;  // the class and comm curves in that order, then those left at their defaults
  // The curves per op calibration tried (enough samples at two sizes or more), fitted or not, in
  // profile order.
  std::vector<CurveReport> op_curves;
  OverlapReport overlap;                 // compute beside communication
  OverlapReport overlap_comm;            // communication beside compute
  std::vector<OverheadReport> blocking;  // by scope
  std::vector<OverheadReport> dispatch;  // by device (fit_dispatch_overheads)
  std::vector<SkewReport> skew;          // by device (fit_rank_skew)
  std::vector<SharingReport> sharing;    // by device, for devices with samples sharing a host
};

// `devices`: every device the compute samples name (defaults of held parameters come from
// its default curve). Host sharing is fitted first, and the samples of ranks that shared a host
// are divided by it before the curves, corrections by shape and overlap slowdown are fitted. Throws
// InternalError on samples that break their own contract (non-positive seconds, unknown device).
CalibrationFit fit_calibration(const std::vector<ComputeSample>& compute,
                               const std::vector<CommSample>& comm,
                               const std::map<std::string, pb::DeviceSpec>& devices,
                               const FitOptions& options = {});

// Adds the dispatch overhead of every device with at least options.min_samples samples to
// `fit` (profile and report); with fewer, nothing is added for it.
void fit_dispatch_overheads(const std::vector<DispatchSample>& samples, const FitOptions& options,
                            CalibrationFit& fit);

// Adds the communication slowdown beside compute to `fit` (profile and report) from `samples`,
// against the CommCurves `fit` holds (call after fit_calibration); with fewer than
// options.min_samples usable samples, or a median below 1, the report says why nothing is added.
void fit_overlap_comm_slowdown(const std::vector<OverlappedCommSample>& samples,
                               const FitOptions& options, CalibrationFit& fit);

// Adds the rank skew of every device with at least options.min_samples samples and a positive
// fit to `fit` (profile and report); otherwise the report says why nothing is added.
void fit_rank_skew(const std::vector<SkewSample>& samples, const FitOptions& options,
                   CalibrationFit& fit);

// The time ComputeCostModel predicts for `s` under `curve` (the formula the fit fits).
double predict_compute_seconds(const pb::ComputeCurve& curve, const ComputeSample& s);
// The time CollectiveCostModel predicts for `s` under `curve`.
double predict_comm_seconds(const pb::CommCurve& curve, const CommSample& s);

}  // namespace orrery::calibration
