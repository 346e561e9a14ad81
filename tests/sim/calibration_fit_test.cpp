// Calibration fits: the formula fitted is the cost model's own; known parameters come back from
// samples they generated; what the samples cannot determine is held and said so; the same
// samples give the same bytes.
#include <cmath>

#include <gtest/gtest.h>

#include "orrery/sim/calibration_fit.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::sim {
namespace {

// A device with round numbers: 100 GFLOP/s fp32, 20 GB/s.
pb::DeviceSpec test_device() {
  pb::DeviceSpec d;
  d.set_name("test-core");
  d.set_kind(pb::DEVICE_KIND_CPU);
  d.mutable_peak_flops()->set_fp32(100e9);
  d.set_memory_bytes(1e9);
  d.set_memory_bandwidth_bytes_per_s(20e9);
  return d;
}

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

ComputeSample sample(double flops, double bytes) {
  ComputeSample s;
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
std::vector<ComputeSample> gemm_samples(const pb::ComputeCurve& truth, double noise) {
  std::vector<ComputeSample> out;
  int i = 0;
  for (double n : {64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0})
    out.push_back(sample(2 * n * n * n, 12 * n * n));
  for (double n : {512.0, 1024.0, 2048.0, 4096.0})
    out.push_back(sample(2 * n * n, 4 * (2 * n + n * n)));
  for (auto& s : out) {
    s.seconds = predict_compute_seconds(truth, s) * (1 + noise * std::sin(1.7 * ++i));
    s.source = "test";
  }
  return out;
}

std::map<std::string, pb::DeviceSpec> devices() { return {{"test-core", test_device()}}; }

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
    ComputeSample s = sample(flops, bytes);
    s.device = "H100-SXM";
    s.peak_flops_per_s = topologies::peak_flops(h100, "bf16");
    s.memory_bytes_per_s = h100.memory_bandwidth_bytes_per_s();
    EXPECT_DOUBLE_EQ(predict_compute_seconds(profile.compute(0), s),
                     model.seconds(h100, pb::OP_CLASS_GEMM, flops, bytes));
  }
}

TEST(CalibrationFit, RecoversAllFourParametersFromBothRegimes) {
  // The squares are compute-bound: 64^3 takes (5.2e5 + 2e6) / (1e11 x 0.6) = 42 us against
  // 49 kB / (20 GB/s x 0.7) = 3.5 us. The matrix-vector products are memory-bound: 1 x 512 x
  // 512 reads 1.05 MB, 75 us, against (5.2e5 + 2e6) / 6e10 = 42 us. Both regimes: all four
  // parameters are determined (the memory-bound ones fix the overhead, the squares the rest).
  const pb::ComputeCurve truth = curve(0.6, 2e6, 0.7, 15e-6);
  const CalibrationFit fit = fit_calibration(gemm_samples(truth, 0), {}, devices());
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
  const CalibrationFit fit = fit_calibration(gemm_samples(truth, 0.02), {}, devices());
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
  std::vector<ComputeSample> squares = gemm_samples(truth, 0);
  squares.resize(6);
  const CalibrationFit fit = fit_calibration(squares, {}, devices());
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

CommSample comm(double bytes, int64_t ranks, double latency, double bus_bw) {
  CommSample s;
  s.scope = "intra_node";
  s.collective = pb::COLLECTIVE_KIND_ALL_REDUCE;
  s.bytes = bytes;
  s.ranks = ranks;
  // all_reduce's bus factor 2(n-1)/n.
  s.seconds =
      latency + bytes * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks) / bus_bw;
  s.source = "test";
  return s;
}

TEST(CalibrationFit, CommunicationAlphaBeta) {
  // 40 us + bytes x 2(n-1)/n / 2 GB/s on 2 and 4 ranks, 4 KiB to 64 MiB.
  std::vector<CommSample> samples;
  for (double b = 4096; b <= 64.0 * 1024 * 1024; b *= 4) {
    samples.push_back(comm(b, 2, 40e-6, 2e9));
    samples.push_back(comm(b, 4, 40e-6, 2e9));
  }
  const CalibrationFit fit = fit_calibration({}, samples, {});
  ASSERT_EQ(fit.profile.comm_size(), 1);
  const pb::CommCurve& c = fit.profile.comm(0);
  EXPECT_EQ(c.scope(), "intra_node");
  EXPECT_EQ(c.collective(), pb::COLLECTIVE_KIND_ALL_REDUCE);
  EXPECT_NEAR(c.latency_s(), 40e-6, 1e-12);
  EXPECT_NEAR(c.bandwidth_bytes_per_s(), 2e9, 1e-3);
  EXPECT_EQ(fitted(c.fit()), (std::vector<std::string>{"latency_s", "bandwidth_bytes_per_s"}));
  EXPECT_EQ(c.fit().samples(), 16);
  for (const auto& s : samples) EXPECT_NEAR(predict_comm_seconds(c, s) / s.seconds, 1, 1e-9);
}

TEST(CalibrationFit, OneMessageSizeCannotSeparateLatency) {
  // Three repeats of 1 MiB: latency is held at 0 and the bandwidth carries the whole time,
  // 1 MiB x 1 / (40 us + 1 MiB / 2 GB/s) = 1.9262 GB/s.
  const std::vector<CommSample> samples = {
      comm(1 << 20, 2, 40e-6, 2e9), comm(1 << 20, 2, 40e-6, 2e9), comm(1 << 20, 2, 40e-6, 2e9)};
  const CalibrationFit fit = fit_calibration({}, samples, {});
  const pb::CommCurve& c = fit.profile.comm(0);
  EXPECT_EQ(fitted(c.fit()), std::vector<std::string>{"bandwidth_bytes_per_s"});
  EXPECT_EQ(c.latency_s(), 0);
  EXPECT_NEAR(c.bandwidth_bytes_per_s(), 1048576.0 / (40e-6 + 1048576.0 / 2e9), 1);
  ASSERT_EQ(fit.curves[0].held.size(), 1u);
  EXPECT_EQ(fit.curves[0].held[0].name, "latency_s");
}

TEST(CalibrationFit, TooFewSamplesKeepTheDefault) {
  std::vector<ComputeSample> two = gemm_samples(curve(0.6, 0, 0.7, 1e-5), 0);
  two.resize(2);
  const CalibrationFit fit = fit_calibration(two, {comm(4096, 2, 1e-5, 1e9)}, devices());
  EXPECT_EQ(fit.profile.compute_size(), 0);
  EXPECT_EQ(fit.profile.comm_size(), 0);
  ASSERT_EQ(fit.curves.size(), 2u);
  EXPECT_FALSE(fit.curves[0].fitted);
  EXPECT_EQ(fit.curves[0].device_or_scope, "test-core");
  EXPECT_EQ(fit.curves[0].what, "gemm");
  EXPECT_EQ(fit.curves[0].note, "2 sample(s), 3 needed: the default stays");
  EXPECT_EQ(fit.curves[1].what, "all_reduce");
}

TEST(CalibrationFit, SameSamplesSameBytes) {
  const auto samples = gemm_samples(curve(0.6, 2e6, 0.7, 15e-6), 0.02);
  std::vector<CommSample> c;
  for (double b = 4096; b <= 1 << 24; b *= 4) c.push_back(comm(b, 2, 30e-6, 3e9));
  const std::string a = fit_calibration(samples, c, devices()).profile.SerializeAsString();
  const std::string b = fit_calibration(samples, c, devices()).profile.SerializeAsString();
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace orrery::sim
