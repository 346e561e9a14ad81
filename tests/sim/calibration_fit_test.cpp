// Calibration fits: the formula fitted is the cost model's own; known parameters come back from
// samples they generated; what the samples cannot determine is held and said so; the same
// samples give the same bytes.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "all_reduce_sample.hpp"
#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"
#include "test_core_device.hpp"

namespace orrery::sim {
namespace {

pb::DeviceSpec test_device() { return test::test_core(); }

pb::ComputeCurve curve(double emax, double h, double me, double o) {
  pb::ComputeCurve c;
  c.set_device("test-core");
  c.set_op_class(pb::OP_CLASS_GEMM);
  c.set_max_efficiency(emax);
  c.set_half_saturation_flops(h);
  c.set_memory_efficiency(me);
  c.set_overhead_s(o);
  return c;
}

calibration::ComputeSample sample(double flops, double bytes) {
  calibration::ComputeSample s;
  s.device = "test-core";
  s.op_class = pb::OP_CLASS_GEMM;
  s.flops = flops;
  s.bytes = bytes;
  s.peak_flops_per_s = 100e9;
  s.memory_bytes_per_s = 20e9;
  return s;
}

// Square fp32 GEMMs n^3 (2n^3 FLOPs, 12 n^2 bytes) and matrix-vector products 1 x n x n
// (2 n^2 FLOPs, 4 (2n + n^2) bytes), timed by `truth` times a deterministic wobble of `noise`.
std::vector<calibration::ComputeSample> gemm_samples(const pb::ComputeCurve& truth, double noise) {
  std::vector<calibration::ComputeSample> out;
  int i = 0;
  for (double n : {64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0})
    out.push_back(sample(2 * n * n * n, 12 * n * n));
  for (double n : {512.0, 1024.0, 2048.0, 4096.0})
    out.push_back(sample(2 * n * n, 4 * (2 * n + n * n)));
  for (auto& s : out) {
    s.seconds = calibration::predict_compute_seconds(truth, s) * (1 + noise * std::sin(1.7 * ++i));
    s.source = "test";
  }
  return out;
}

std::map<std::string, pb::DeviceSpec> devices() { return test::test_core_devices(); }

std::vector<std::string> fitted(const pb::FitStats& f) {
  return {f.fitted_params().begin(), f.fitted_params().end()};
}

TEST(CalibrationFit, FitsTheCostModelsOwnFormula) {
  // predict_compute_seconds is ComputeCostModel::seconds; pin it against the model on a real
  // device and dtype: H100 bf16, 989 TFLOP/s, 3.35 TB/s.
  pb::ClusterSpec none;
  const pb::DeviceSpec& h100 = topologies::find_device(none, "H100-SXM");
  pb::CalibrationProfile profile;
  *profile.add_compute() = curve(0.7, 4e9, 0.8, 5e-6);
  profile.mutable_compute(0)->set_device("H100-SXM");
  const ComputeCostModel model("bf16", &profile);
  for (const auto& [flops, bytes] :
       std::vector<std::pair<double, double>>{{1e12, 1e8}, {1e6, 1e9}, {3e9, 3e6}}) {
    calibration::ComputeSample s = sample(flops, bytes);
    s.device = "H100-SXM";
    s.peak_flops_per_s = topologies::peak_flops(h100, "bf16");
    s.memory_bytes_per_s = h100.memory_bandwidth_bytes_per_s();
    EXPECT_DOUBLE_EQ(calibration::predict_compute_seconds(profile.compute(0), s),
                     model.seconds(h100, pb::OP_CLASS_GEMM, flops, bytes));
  }
}

TEST(CalibrationFit, RecoversAllFourParametersFromBothRegimes) {
  // The squares are compute-bound: 64^3 takes (5.2e5 + 2e6) / (1e11 x 0.6) = 42 us against
  // 49 kB / (20 GB/s x 0.7) = 3.5 us. The matrix-vector products are memory-bound: 1 x 512 x
  // 512 reads 1.05 MB, 75 us, against (5.2e5 + 2e6) / 6e10 = 42 us. Both regimes: all four
  // parameters are determined (the memory-bound ones fix the overhead, the squares the rest).
  const pb::ComputeCurve truth = curve(0.6, 2e6, 0.7, 15e-6);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(gemm_samples(truth, 0), {}, devices());
  ASSERT_EQ(fit.profile.compute_size(), 1);
  const pb::ComputeCurve& c = fit.profile.compute(0);
  EXPECT_NEAR(c.max_efficiency(), 0.6, 1e-6);
  EXPECT_NEAR(c.half_saturation_flops(), 2e6, 2e6 * 1e-4);
  EXPECT_NEAR(c.memory_efficiency(), 0.7, 1e-6);
  EXPECT_NEAR(c.overhead_s(), 15e-6, 15e-6 * 1e-4);
  EXPECT_EQ(fitted(c.fit()), (std::vector<std::string>{"max_efficiency", "half_saturation_flops",
                                                       "memory_efficiency", "overhead_s"}));
  EXPECT_EQ(c.fit().samples(), 10);
  EXPECT_LT(c.fit().max_abs_rel_error(), 1e-6);
  EXPECT_TRUE(fit.curves[0].fitted);
  EXPECT_TRUE(fit.curves[0].held.empty());
}

TEST(CalibrationFit, StandardErrorsCoverNoisyTruth) {
  // 2% wobble: the fit lands near the truth and its standard errors say how near.
  const pb::ComputeCurve truth = curve(0.6, 2e6, 0.7, 15e-6);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(gemm_samples(truth, 0.02), {}, devices());
  const pb::ComputeCurve& c = fit.profile.compute(0);
  ASSERT_EQ(c.fit().param_std_errors_size(), 4);
  const double values[] = {c.max_efficiency(), c.half_saturation_flops(), c.memory_efficiency(),
                           c.overhead_s()};
  const double truths[] = {0.6, 2e6, 0.7, 15e-6};
  for (int i = 0; i < 4; ++i) {
    const double se = c.fit().param_std_errors(i);
    EXPECT_GT(se, 0) << c.fit().fitted_params(i);
    EXPECT_LT(std::abs(values[i] - truths[i]), 4 * se + 1e-3 * truths[i])
        << c.fit().fitted_params(i);
  }
  EXPECT_GT(c.fit().median_abs_rel_error(), 1e-4);
  EXPECT_LT(c.fit().max_abs_rel_error(), 0.05);
}

TEST(CalibrationFit, HoldsHalfSaturationWhenEverySampleIsComputeBound) {
  // Squares only: every prediction is overhead + (F + h) / (P emax), so only overhead +
  // h / (P emax) is determined: h is held at 0 and the overhead carries it,
  // 15 us + 2e8 / (1e11 x 0.6) = 3.348 ms. No sample depends on memory_efficiency: default.
  const pb::ComputeCurve truth = curve(0.6, 2e8, 0.7, 15e-6);
  std::vector<calibration::ComputeSample> squares = gemm_samples(truth, 0);
  squares.resize(6);
  const calibration::CalibrationFit fit = calibration::fit_calibration(squares, {}, devices());
  const pb::ComputeCurve& c = fit.profile.compute(0);
  EXPECT_EQ(fitted(c.fit()), (std::vector<std::string>{"max_efficiency", "overhead_s"}));
  EXPECT_NEAR(c.max_efficiency(), 0.6, 1e-6);
  EXPECT_EQ(c.half_saturation_flops(), 0);
  EXPECT_NEAR(c.overhead_s(), 15e-6 + 2e8 / (1e11 * 0.6), 1e-9);
  EXPECT_LT(c.fit().max_abs_rel_error(), 1e-6);
  ASSERT_EQ(fit.curves[0].held.size(), 2u);
  EXPECT_EQ(fit.curves[0].held[0].name, "half_saturation_flops");
  EXPECT_EQ(fit.curves[0].held[1].name, "memory_efficiency");
  EXPECT_EQ(fit.curves[0].held[1].value, 0.5);  // the CPU default (compute_defaults.cpp)
}

TEST(CalibrationFit, CopiesFitTheirBandwidthFromBytesAlone) {
  // `orrery bench`'s copies (x.clone(), no FLOPs) of 16 KiB to 64 MiB, timed 10 us + bytes /
  // (20 GB/s x 0.3): the copy class gets that memory efficiency and overhead, its FLOP
  // parameters are held, and the elementwise class (which no sample measured) keeps its default.
  pb::ComputeCurve truth = curve(0.25, 0, 0.3, 10e-6);
  truth.set_op_class(pb::OP_CLASS_COPY);
  std::vector<calibration::ComputeSample> copies;
  for (double elements : {4096.0, 262144.0, 1048576.0, 4194304.0, 16777216.0}) {
    calibration::ComputeSample s = sample(0, 2 * 4 * elements);
    s.op_class = pb::OP_CLASS_COPY;
    s.seconds = calibration::predict_compute_seconds(truth, s);
    s.source = "test";
    copies.push_back(s);
  }
  const calibration::CalibrationFit fit = calibration::fit_calibration(copies, {}, devices());
  ASSERT_EQ(fit.profile.compute_size(), 1);
  const pb::ComputeCurve& c = fit.profile.compute(0);
  EXPECT_EQ(c.op_class(), pb::OP_CLASS_COPY);
  EXPECT_EQ(fitted(c.fit()), (std::vector<std::string>{"memory_efficiency", "overhead_s"}));
  EXPECT_NEAR(c.memory_efficiency(), 0.3, 1e-6);
  EXPECT_NEAR(c.overhead_s(), 10e-6, 1e-9);

  // FSDP's copy-out of 4 MiB of fp32 (plan/include/orrery/plan/layer_program.hpp's CopyWork) costs
  // that curve.
  const ComputeCostModel model("fp32", &fit.profile);
  const double bytes = 2 * 4 * 1048576.0;
  EXPECT_NEAR(model.seconds(test_device(), pb::OP_CLASS_COPY, 0, bytes),
              10e-6 + bytes / (20e9 * 0.3), 1e-9);
  EXPECT_NEAR(model.seconds(test_device(), pb::OP_CLASS_ELEMENTWISE, 0, bytes),
              ComputeCostModel("fp32").seconds(test_device(), pb::OP_CLASS_ELEMENTWISE, 0, bytes),
              1e-12);
}

calibration::CommSample comm(double bytes, int64_t ranks, double latency, double bus_bw) {
  return test::all_reduce_sample(bytes, ranks, latency, bus_bw);
}

TEST(CalibrationFit, CommunicationAlphaBeta) {
  // 40 us + bytes x 2(n-1)/n / 2 GB/s on 2 and 4 ranks, 4 KiB to 64 MiB.
  std::vector<calibration::CommSample> samples;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) {
    samples.push_back(comm(b, 2, 40e-6, 2e9));
    samples.push_back(comm(b, 4, 40e-6, 2e9));
  }
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  ASSERT_EQ(fit.profile.comm_size(), 1);
  const pb::CommCurve& c = fit.profile.comm(0);
  EXPECT_EQ(c.scope(), "intra_node");
  EXPECT_EQ(c.collective(), pb::COLLECTIVE_KIND_ALL_REDUCE);
  EXPECT_NEAR(c.latency_s(), 40e-6, 1e-12);
  EXPECT_NEAR(c.bandwidth_bytes_per_s(), 2e9, 1e-3);
  EXPECT_EQ(fitted(c.fit()), (std::vector<std::string>{"latency_s", "bandwidth_bytes_per_s"}));
  EXPECT_EQ(c.fit().samples(), 16);
  for (const auto& s : samples)
    EXPECT_NEAR(calibration::predict_comm_seconds(c, s) / s.seconds, 1, 1e-9);
}

TEST(CalibrationFit, OneMessageSizeCannotSeparateLatency) {
  // Three repeats of 1 MiB: latency is held at 0 and the bandwidth carries the whole time,
  // 1 MiB x 1 / (40 us + 1 MiB / 2 GB/s) = 1.9262 GB/s.
  const std::vector<calibration::CommSample> samples = {
      comm(1 << 20, 2, 40e-6, 2e9), comm(1 << 20, 2, 40e-6, 2e9), comm(1 << 20, 2, 40e-6, 2e9)};
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  const pb::CommCurve& c = fit.profile.comm(0);
  EXPECT_EQ(fitted(c.fit()), std::vector<std::string>{"bandwidth_bytes_per_s"});
  EXPECT_EQ(c.latency_s(), 0);
  EXPECT_NEAR(c.bandwidth_bytes_per_s(), 1048576.0 / (40e-6 + 1048576.0 / 2e9), 1);
  ASSERT_EQ(fit.curves[0].held.size(), 1u);
  EXPECT_EQ(fit.curves[0].held[0].name, "latency_s");
}

TEST(CalibrationFit, PointToPointLatencyOnTheCollectivesBandwidth) {
  // A pipeline's receives move one size (128 KiB, 2-4 ms each): latency and bandwidth cannot be
  // told apart from them, so the bandwidth is the all-reduce curve's (2 GB/s, fitted from many
  // sizes) and the latency the mean time beyond it: 3 ms - 65.536 us.
  std::vector<calibration::CommSample> samples;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) samples.push_back(comm(b, 2, 40e-6, 2e9));
  for (double t : {2e-3, 3e-3, 4e-3}) {
    calibration::CommSample p2p;
    p2p.scope = "intra_node";
    p2p.bytes = 131072;
    p2p.ranks = 2;
    p2p.seconds = t;
    p2p.source = "test";
    samples.push_back(p2p);
  }
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  const pb::CommCurve* c = CollectiveCostModel::calibrated_curve(fit.profile, "intra_node",
                                                                 pb::COLLECTIVE_KIND_UNSPECIFIED);
  ASSERT_NE(c, nullptr);
  EXPECT_NEAR(c->bandwidth_bytes_per_s(), 2e9, 1e-3);
  EXPECT_NEAR(c->latency_s(), 3e-3 - 131072 / 2e9, 1e-12);
  EXPECT_EQ(fitted(c->fit()), std::vector<std::string>{"latency_s"});
  const auto report =
      std::find_if(fit.curves.begin(), fit.curves.end(),
                   [](const calibration::CurveReport& r) { return r.what == "send/recv"; });
  ASSERT_NE(report, fit.curves.end());
  EXPECT_TRUE(report->fitted);
  ASSERT_EQ(report->held.size(), 1u);
  EXPECT_EQ(report->held[0].name, "bandwidth_bytes_per_s");
  EXPECT_NE(report->held[0].reason.find("all_reduce"), std::string::npos) << report->held[0].reason;

  // Without a collective of the scope to take a bandwidth from, the default stays, and says why.
  const calibration::CalibrationFit alone =
      calibration::fit_calibration({}, {samples.end() - 3, samples.end()}, {});
  EXPECT_EQ(alone.profile.comm_size(), 0);
  ASSERT_EQ(alone.curves.size(), 1u);
  EXPECT_FALSE(alone.curves[0].fitted);
  EXPECT_NE(alone.curves[0].note.find("no collective of this scope"), std::string::npos)
      << alone.curves[0].note;
}

TEST(CalibrationFit, TooFewSamplesKeepTheDefault) {
  std::vector<calibration::ComputeSample> two = gemm_samples(curve(0.6, 0, 0.7, 1e-5), 0);
  two.resize(2);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(two, {comm(4096, 2, 1e-5, 1e9)}, devices());
  EXPECT_EQ(fit.profile.compute_size(), 0);
  EXPECT_EQ(fit.profile.comm_size(), 0);
  ASSERT_EQ(fit.curves.size(), 2u);
  EXPECT_FALSE(fit.curves[0].fitted);
  EXPECT_EQ(fit.curves[0].device_or_scope, "test-core");
  EXPECT_EQ(fit.curves[0].what, "gemm");
  EXPECT_EQ(fit.curves[0].note, "2 sample(s), 3 needed: the default stays");
  EXPECT_EQ(fit.curves[1].what, "all_reduce");
}

// GEMM samples with shapes: squares n x n x n, and a family of "skinny" [128, n, 256] forward
// GEMMs and their backward passes that run `skinny_factor` slower than the curve says.
std::vector<calibration::ComputeSample> shaped_samples(const pb::ComputeCurve& truth,
                                                       double skinny_factor) {
  std::vector<calibration::ComputeSample> out;
  for (int64_t n : {64, 128, 256, 512, 1024, 2048}) {
    calibration::ComputeSample s = sample(2.0 * n * n * n, 12.0 * n * n);
    s.shape = {n, n, n};
    s.seconds = calibration::predict_compute_seconds(truth, s);
    out.push_back(s);
  }
  for (int64_t n : {256, 512, 1024}) {
    for (pb::Phase phase : {pb::PHASE_FORWARD, pb::PHASE_BACKWARD}) {
      const double pass = phase == pb::PHASE_BACKWARD ? 2.0 : 1.0;
      calibration::ComputeSample s =
          sample(pass * 2.0 * 128 * n * 256, pass * 4.0 * (128 * 256 + 256 * n + 128 * n));
      s.shape = {128, n, 256};
      s.phase = phase;
      s.seconds = calibration::predict_compute_seconds(truth, s) * skinny_factor;
      out.push_back(s);
    }
  }
  for (auto& s : out) s.source = "test";
  return out;
}

TEST(CalibrationFit, ShapePointsCarryWhatTheCurveMisses) {
  const pb::ComputeCurve truth = curve(0.6, 2e6, 0.7, 15e-6);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(shaped_samples(truth, 1.5), {}, devices());
  ASSERT_EQ(fit.profile.compute_size(), 1);
  const pb::ComputeCurve& c = fit.profile.compute(0);
  // One point per (shape, pass): 6 squares, 3 skinny shapes x 2 passes.
  ASSERT_EQ(c.shape_points_size(), 12);
  const ComputeCostModel model("fp32", &fit.profile);
  // Every measured sample is priced exactly as measured (one sample per point: its own ratio),
  // though the curve alone cannot fit both families.
  for (const calibration::ComputeSample& s : shaped_samples(truth, 1.5)) {
    const double predicted =
        model.seconds(test_device(), s.op_class, s.flops, s.bytes, s.shape, s.phase);
    EXPECT_NEAR(predicted / s.seconds, 1.0, 1e-9)
        << s.shape[0] << "x" << s.shape[1] << "x" << s.shape[2];
  }
  // A skinny shape between two measured ones takes most of their ratio; a shape far from every
  // point takes none; a pass with no points takes none.
  const std::vector<int64_t> between = {128, 724, 256}, far = {65536, 65536, 65536};
  const double mid = ComputeCostModel::shape_correction(c, between, pb::PHASE_FORWARD);
  const double skinny =
      ComputeCostModel::shape_correction(c, std::vector<int64_t>{128, 512, 256}, pb::PHASE_FORWARD);
  const double square =
      ComputeCostModel::shape_correction(c, std::vector<int64_t>{256, 256, 256}, pb::PHASE_FORWARD);
  // The curve splits the difference between the families: it under-prices the skinny ones and
  // over-prices the squares, which the points correct.
  EXPECT_GT(skinny, 1.05);
  EXPECT_LT(square, 1.0);
  EXPECT_GT(mid, 1.0 + 0.8 * (skinny - 1.0));
  EXPECT_NEAR(ComputeCostModel::shape_correction(c, far, pb::PHASE_FORWARD), 1.0, 1e-3);
  pb::ComputeCurve forward_only = c;
  forward_only.clear_shape_points();
  *forward_only.add_shape_points() = c.shape_points(0);
  forward_only.mutable_shape_points(0)->set_time_ratio(2.0);
  forward_only.mutable_shape_points(0)->set_phase(pb::PHASE_FORWARD);
  const std::vector<int64_t> at(c.shape_points(0).shape().begin(), c.shape_points(0).shape().end());
  EXPECT_DOUBLE_EQ(ComputeCostModel::shape_correction(forward_only, at, pb::PHASE_BACKWARD), 1.0);
  EXPECT_DOUBLE_EQ(ComputeCostModel::shape_correction(forward_only, at, pb::PHASE_FORWARD), 2.0);
  // One octave away in one dimension: exp(-1/4) of the correction.
  std::vector<int64_t> twice = at;
  twice[0] *= 2;
  EXPECT_NEAR(ComputeCostModel::shape_correction(forward_only, twice, pb::PHASE_FORWARD),
              std::exp(std::exp(-0.25) * std::log(2.0)), 1e-9);
  // Without shapes (the analytic engine's split ops) nothing changes.
  EXPECT_DOUBLE_EQ(ComputeCostModel::shape_correction(c, {}, pb::PHASE_FORWARD), 1.0);
}

TEST(CalibrationFit, OverlapSlowdownFromOpsBesideCommunication) {
  const pb::ComputeCurve truth = curve(0.6, 2e6, 0.7, 15e-6);
  std::vector<calibration::ComputeSample> samples = gemm_samples(truth, 0);
  // Copies of the same ops that ran beside communication at 1/1.3 speed: fully overlapped ones
  // 1.3x slower; half-overlapped ones m = p / (0.5 + 0.5 / 1.3) (half their time at full speed,
  // half at 1/1.3); a barely overlapped one, much slower, that must not count anywhere.
  const std::vector<calibration::ComputeSample> plain = samples;
  for (const calibration::ComputeSample& p : plain) {
    calibration::ComputeSample full = p, half = p;
    full.overlap = 1.0, full.seconds = p.seconds * 1.3;
    half.overlap = 0.5, half.seconds = p.seconds / (0.5 + 0.5 / 1.3);
    samples.push_back(full);
    samples.push_back(half);
  }
  calibration::ComputeSample barely = plain[0];
  barely.overlap = 0.1, barely.seconds = plain[0].seconds * 5;
  samples.push_back(barely);
  const calibration::CalibrationFit fit = calibration::fit_calibration(samples, {}, devices());
  ASSERT_TRUE(fit.overlap.fitted) << fit.overlap.note;
  EXPECT_EQ(fit.overlap.samples, 2 * static_cast<int64_t>(plain.size()));
  EXPECT_NEAR(fit.profile.overlap_compute_slowdown(), 1.3, 1e-6);
  // The curve saw only the plain ops: it recovers the truth as if the others were absent.
  ASSERT_EQ(fit.profile.compute_size(), 1);
  EXPECT_EQ(fit.profile.compute(0).fit().samples(), static_cast<int64_t>(plain.size()));

  // Overlapped ops no slower than predicted: no slowdown is written.
  std::vector<calibration::ComputeSample> same = plain;
  for (const calibration::ComputeSample& p : plain) {
    calibration::ComputeSample o = p;
    o.overlap = 1.0, o.seconds = p.seconds * 0.9;
    same.push_back(o);
  }
  const calibration::CalibrationFit none = calibration::fit_calibration(same, {}, devices());
  EXPECT_FALSE(none.overlap.fitted);
  EXPECT_EQ(none.profile.overlap_compute_slowdown(), 0);
  EXPECT_NE(none.overlap.note.find("no slower"), std::string::npos) << none.overlap.note;
  // No overlapped ops at all: said so.
  const calibration::CalibrationFit absent = calibration::fit_calibration(plain, {}, devices());
  EXPECT_FALSE(absent.overlap.fitted);
  EXPECT_NE(absent.overlap.note.find("0 compute op(s)"), std::string::npos) << absent.overlap.note;
}

// A stretch of two all-reduces (alone: p seconds together) in flight beside compute for a share
// f of its time, their communication running at 1 / slowdown speed while the rank computed.
calibration::OverlappedCommSample beside_compute(double bytes_a, double bytes_b, double f,
                                                 double slowdown) {
  calibration::OverlappedCommSample o;
  o.collectives = {comm(bytes_a, 2, 40e-6, 2e9), comm(bytes_b, 2, 40e-6, 2e9)};
  const double p = o.collectives[0].seconds + o.collectives[1].seconds;
  // Work done p = (1 - f) m + f m / slowdown.
  o.seconds = p / (1 - f + f / slowdown);
  o.overlap = f;
  o.source = "test stretch";
  return o;
}

TEST(CalibrationFit, CommunicationSlowdownBesideComputeFromStretchesAgainstTheCurves) {
  std::vector<calibration::CommSample> alone;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) alone.push_back(comm(b, 2, 40e-6, 2e9));
  calibration::CalibrationFit fit = calibration::fit_calibration({}, alone, {});
  ASSERT_EQ(fit.profile.comm_size(), 1);
  // Five stretches at 1.6x beside compute for 60-100% of their time, and one that ran faster than
  // its curve even alone (no slowdown explains it, so it counts nowhere).
  std::vector<calibration::OverlappedCommSample> stretches;
  for (double f : {0.6, 0.7, 0.8, 0.9, 1.0})
    stretches.push_back(beside_compute(1 << 20, 4 << 20, f, 1.6));
  calibration::OverlappedCommSample quick = beside_compute(1 << 20, 1 << 20, 0.5, 1.0);
  quick.seconds *= 0.4;
  stretches.push_back(quick);
  calibration::fit_overlap_comm_slowdown(stretches, {}, fit);
  ASSERT_TRUE(fit.overlap_comm.fitted) << fit.overlap_comm.note;
  EXPECT_EQ(fit.overlap_comm.samples, 6);
  EXPECT_NEAR(fit.profile.overlap_comm_slowdown(), 1.6, 1e-6);
  EXPECT_NEAR(fit.overlap_comm.q1, 1.6, 1e-6);
  // The compute side is a field of its own, untouched.
  EXPECT_EQ(fit.profile.overlap_compute_slowdown(), 0);
}

TEST(CalibrationFit, CommunicationSlowdownNeedsCurvesSamplesAndASlowdown) {
  std::vector<calibration::CommSample> alone;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) alone.push_back(comm(b, 2, 40e-6, 2e9));
  // Stretches holding an all-gather, whose kind has no fitted curve: not usable.
  std::vector<calibration::OverlappedCommSample> gathers(
      4, beside_compute(1 << 20, 1 << 20, 1.0, 2.0));
  for (auto& g : gathers) g.collectives[1].collective = pb::COLLECTIVE_KIND_ALL_GATHER;
  calibration::CalibrationFit no_curve = calibration::fit_calibration({}, alone, {});
  calibration::fit_overlap_comm_slowdown(gathers, {}, no_curve);
  EXPECT_FALSE(no_curve.overlap_comm.fitted);
  EXPECT_EQ(no_curve.profile.overlap_comm_slowdown(), 0);
  EXPECT_NE(no_curve.overlap_comm.note.find("0 stretch(es)"), std::string::npos)
      << no_curve.overlap_comm.note;
  EXPECT_NE(no_curve.overlap_comm.note.find("4 with a collective of a kind without a fitted curve"),
            std::string::npos)
      << no_curve.overlap_comm.note;
  // Beside compute no slower than alone (0.9x): nothing written, and the median said.
  calibration::CalibrationFit faster = calibration::fit_calibration({}, alone, {});
  calibration::fit_overlap_comm_slowdown(
      std::vector<calibration::OverlappedCommSample>(3, beside_compute(1 << 20, 1 << 20, 1.0, 0.9)),
      {}, faster);
  EXPECT_FALSE(faster.overlap_comm.fitted);
  EXPECT_EQ(faster.profile.overlap_comm_slowdown(), 0);
  EXPECT_NE(faster.overlap_comm.note.find("median slowdown 0.9)"), std::string::npos)
      << faster.overlap_comm.note;
  // Two samples, three needed.
  calibration::CalibrationFit few = calibration::fit_calibration({}, alone, {});
  calibration::fit_overlap_comm_slowdown(
      std::vector<calibration::OverlappedCommSample>(2, beside_compute(1 << 20, 1 << 20, 1.0, 2.0)),
      {}, few);
  EXPECT_FALSE(few.overlap_comm.fitted);
  EXPECT_NE(few.overlap_comm.note.find("3 needed"), std::string::npos) << few.overlap_comm.note;
}

TEST(CalibrationFit, BlockingOverheadFromCollectivesIssuedInLineWithCompute) {
  // Back to back: 40 us + bytes x 2(n-1)/n / 2 GB/s, 4 KiB to 4 MiB. In line with compute, the
  // same collectives took 1.5 ms longer, give or take 0.2 ms (one sample much slower).
  std::vector<calibration::CommSample> samples;
  for (double b = 4096; b <= 4.0 * 1024 * 1024; b *= 4) samples.push_back(comm(b, 2, 40e-6, 2e9));
  const size_t back_to_back = samples.size();
  const double extra[] = {1.3e-3, 1.5e-3, 1.7e-3, 1.5e-3, 9e-3};
  for (double e : extra) {
    calibration::CommSample s = comm(65536, 2, 40e-6 + e, 2e9);
    s.blocking = true;
    samples.push_back(s);
  }
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  // The curve saw only the back-to-back samples, and recovers them exactly.
  ASSERT_EQ(fit.profile.comm_size(), 1);
  EXPECT_EQ(fit.profile.comm(0).fit().samples(), static_cast<int64_t>(back_to_back));
  EXPECT_NEAR(fit.profile.comm(0).latency_s(), 40e-6, 1e-12);
  // The overhead is the clipped mean residual per message round (an all-reduce on 2 ranks runs
  // 2(n-1) = 2), which the slow sample does not move: 1.5 ms / 2.
  ASSERT_EQ(fit.blocking.size(), 1u);
  ASSERT_TRUE(fit.blocking[0].fitted) << fit.blocking[0].note;
  ASSERT_EQ(fit.profile.blocking_overhead_size(), 1);
  const pb::BlockingOverhead& o = fit.profile.blocking_overhead(0);
  EXPECT_EQ(o.scope(), "intra_node");
  EXPECT_EQ(o.samples(), 5);
  EXPECT_NEAR(o.per_round_s(), 0.75e-3, 1e-12);
  EXPECT_EQ(o.overhead_s(), 0);
  EXPECT_NEAR(o.q1_s(), 0.75e-3, 1e-12);
  EXPECT_NEAR(o.q3_s(), 0.85e-3, 1e-12);
}

TEST(CalibrationFit, BlockingOverheadSplitsPerCollectiveAndPerRoundAtTwoRoundCounts) {
  // Back to back, all-reduces and all-gathers on 2 ranks: 40 us + bytes x (bus factor) / 2 GB/s.
  // In line with compute, an all-reduce (2 rounds) took 1.0 ms longer, an all-gather (1 round)
  // 0.6 ms: 0.2 ms per collective and 0.4 ms per round.
  std::vector<calibration::CommSample> samples;
  for (double b = 4096; b <= 4.0 * 1024 * 1024; b *= 4) {
    samples.push_back(comm(b, 2, 40e-6, 2e9));
    calibration::CommSample g = comm(b, 2, 40e-6, 2e9);
    g.collective = pb::COLLECTIVE_KIND_ALL_GATHER;
    g.seconds = 40e-6 + b * 0.5 / 2e9;
    samples.push_back(g);
  }
  for (int i = 0; i < 4; ++i) {
    calibration::CommSample r = comm(65536, 2, 40e-6 + 1.0e-3, 2e9);
    r.blocking = true;
    samples.push_back(r);
    calibration::CommSample g = r;
    g.collective = pb::COLLECTIVE_KIND_ALL_GATHER;
    g.seconds = 40e-6 + 65536 * 0.5 / 2e9 + 0.6e-3;
    samples.push_back(g);
  }
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  ASSERT_EQ(fit.blocking.size(), 1u);
  ASSERT_TRUE(fit.blocking[0].fitted) << fit.blocking[0].note;
  EXPECT_TRUE(fit.blocking[0].split);
  ASSERT_EQ(fit.profile.blocking_overhead_size(), 1);
  const pb::BlockingOverhead& o = fit.profile.blocking_overhead(0);
  EXPECT_NEAR(o.overhead_s(), 0.2e-3, 1e-9);
  EXPECT_NEAR(o.per_round_s(), 0.4e-3, 1e-9);
  EXPECT_NEAR(fit.blocking[0].per_collective_s, 0.2e-3, 1e-9);
  // The engines charge each kind what it measured.
  const topologies::Topology node(topologies::load_cluster("dgx-h100", 1));
  const CollectiveCostModel model(node, &fit.profile);
  EXPECT_NEAR(model.blocking_overhead_s(pb::COLLECTIVE_KIND_ALL_REDUCE, {0, 1}), 1.0e-3, 1e-9);
  EXPECT_NEAR(model.blocking_overhead_s(pb::COLLECTIVE_KIND_ALL_GATHER, {0, 1}), 0.6e-3, 1e-9);

  // An all-gather no dearer than an all-reduce's rounds say (0.4 ms against 1.0): no part per
  // collective can be negative, so it is all per round, through the origin.
  for (calibration::CommSample& s : samples) {
    if (s.blocking && s.collective == pb::COLLECTIVE_KIND_ALL_GATHER) s.seconds -= 0.3e-3;
  }
  const calibration::CalibrationFit cheap = calibration::fit_calibration({}, samples, {});
  ASSERT_EQ(cheap.profile.blocking_overhead_size(), 1);
  EXPECT_EQ(cheap.profile.blocking_overhead(0).overhead_s(), 0);
  // Least squares through the origin over the round counts' means: (2 x 1.0 + 1 x 0.3) / (4 + 1)
  // ms.
  EXPECT_NEAR(cheap.profile.blocking_overhead(0).per_round_s(), 2.3e-3 / 5, 1e-9);
}

TEST(CalibrationFit, AShapesPointIsTheClippedMeanOfItsRatios) {
  // The squares price the curve exactly; six more samples of one skinny shape ran 1.0-1.4 times
  // the curve (leaning right) and one 10 times (a descheduled op).
  const pb::ComputeCurve truth = curve(0.6, 2e6, 0.7, 15e-6);
  std::vector<calibration::ComputeSample> samples = shaped_samples(truth, 1.0);
  std::vector<calibration::ComputeSample> skinny;
  for (double k : {1.0, 1.0, 1.0, 1.1, 1.3, 1.4, 10.0}) {
    calibration::ComputeSample s =
        sample(2.0 * 128 * 4096 * 256, 4.0 * (128 * 256 + 256 * 4096 + 128 * 4096));
    s.shape = {128, 4096, 256};
    s.phase = pb::PHASE_FORWARD;
    s.seconds = calibration::predict_compute_seconds(truth, s) * k;
    s.source = "test";
    skinny.push_back(s);
  }
  samples.insert(samples.end(), skinny.begin(), skinny.end());
  const calibration::CalibrationFit fit = calibration::fit_calibration(samples, {}, devices());
  ASSERT_EQ(fit.profile.compute_size(), 1);
  const pb::ComputeCurve& c = fit.profile.compute(0);
  // The six typical ops, priced one by one, add up to what they took together; a median would
  // price each at 1.1 and fall 2% short.
  const ComputeCostModel model("fp32", &fit.profile);
  double measured = 0, predicted = 0;
  for (size_t i = 0; i + 1 < skinny.size(); ++i) {
    measured += skinny[i].seconds;
    predicted += model.seconds(test_device(), skinny[i].op_class, skinny[i].flops, skinny[i].bytes,
                               skinny[i].shape, skinny[i].phase);
  }
  EXPECT_NEAR(predicted / measured, 1.0, 1e-6);
  int64_t behind = 0;  // the skinny shape's point: all seven samples, the slow one included
  for (const auto& p : c.shape_points()) {
    if (p.shape(1) == 4096) behind = p.samples();
  }
  EXPECT_EQ(behind, 7);
}

TEST(CalibrationFit, DispatchOverheadIsTheClippedMeanPerOpUntimedTimePerDevice) {
  std::vector<calibration::DispatchSample> samples;
  for (double us : {50.0, 60.0, 70.0, 400.0, 65.0})
    samples.push_back({"cpu-a", us * 1e-6, "t.json: rank 0"});
  samples.push_back({"cpu-b", 80e-6, "u.json: rank 0"});  // one rank: too few
  calibration::CalibrationFit fit;
  calibration::fit_dispatch_overheads(samples, {}, fit);
  ASSERT_EQ(fit.dispatch.size(), 2u);
  ASSERT_TRUE(fit.dispatch[0].fitted) << fit.dispatch[0].note;
  ASSERT_EQ(fit.profile.dispatch_overhead_size(), 1);
  const pb::DispatchOverhead& d = fit.profile.dispatch_overhead(0);
  EXPECT_EQ(d.device(), "cpu-a");
  EXPECT_NEAR(d.per_op_s(), (50 + 60 + 70 + 65) / 4.0 * 1e-6,
              1e-15);  // the clipped mean: the slow rank is out
  EXPECT_NEAR(d.q1_s(), 60e-6, 1e-15);
  EXPECT_NEAR(d.q3_s(), 70e-6, 1e-15);
  EXPECT_EQ(d.samples(), 5);
  EXPECT_FALSE(fit.dispatch[1].fitted);
  EXPECT_NE(fit.dispatch[1].note.find("1 rank(s)"), std::string::npos) << fit.dispatch[1].note;
  // Refitting the same samples gives the same profile.
  calibration::CalibrationFit again;
  calibration::fit_dispatch_overheads(samples, {}, again);
  EXPECT_EQ(again.profile.SerializeAsString(), fit.profile.SerializeAsString());
}

TEST(CalibrationFit, BlockingSamplesFitTheCurveWhenTheyAreAllThereIs) {
  // Only blocking samples of a kind: they make its curve, and no overhead is claimed.
  std::vector<calibration::CommSample> samples;
  for (double b = 4096; b <= 4.0 * 1024 * 1024; b *= 4) {
    samples.push_back(comm(b, 2, 2e-3, 2e9));
    samples.back().blocking = true;
  }
  const calibration::CalibrationFit fit = calibration::fit_calibration({}, samples, {});
  ASSERT_EQ(fit.profile.comm_size(), 1);
  EXPECT_NEAR(fit.profile.comm(0).latency_s(), 2e-3, 1e-9);
  EXPECT_EQ(fit.profile.blocking_overhead_size(), 0);
  EXPECT_TRUE(fit.blocking.empty());

  // Blocking collectives no slower than back to back: said so, nothing written.
  std::vector<calibration::CommSample> same;
  for (double b = 4096; b <= 4.0 * 1024 * 1024; b *= 4) same.push_back(comm(b, 2, 40e-6, 2e9));
  for (int i = 0; i < 3; ++i) {
    same.push_back(comm(65536, 2, 30e-6, 2e9));
    same.back().blocking = true;
  }
  const calibration::CalibrationFit none = calibration::fit_calibration({}, same, {});
  EXPECT_EQ(none.profile.blocking_overhead_size(), 0);
  ASSERT_EQ(none.blocking.size(), 1u);
  EXPECT_FALSE(none.blocking[0].fitted);
  EXPECT_NE(none.blocking[0].note.find("no longer than back to back"), std::string::npos)
      << none.blocking[0].note;
}

TEST(CalibrationFit, SameSamplesSameBytes) {
  const auto samples = gemm_samples(curve(0.6, 2e6, 0.7, 15e-6), 0.02);
  std::vector<calibration::CommSample> c;
  for (double b = 4096; b <= 1 << 24; b *= 4) c.push_back(comm(b, 2, 30e-6, 3e9));
  const std::string a =
      calibration::fit_calibration(samples, c, devices()).profile.SerializeAsString();
  const std::string b =
      calibration::fit_calibration(samples, c, devices()).profile.SerializeAsString();
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace orrery::sim
