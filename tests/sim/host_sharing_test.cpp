// Ranks sharing a host (CalibrationProfile.host_sharing): calibrate compares the op shapes that
// ran both with one rank on the host and with several, and divides the shared samples by the
// slowdown before fitting the curves; both engines multiply every compute op of a rank by the
// slowdown its plan's ranks on its host give, and leave a rank alone on its host as it was.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "test_core_device.hpp"

namespace orrery::sim {
namespace {

pb::HostSharing sharing(const std::string& device, double slowdown, int64_t ranks) {
  pb::HostSharing h;
  h.set_device(device);
  h.set_slowdown(slowdown);
  h.set_ranks(ranks);
  return h;
}

TEST(HostSharing, FactorGrowsLinearlyInTheRanksBeyondTheFirst) {
  const pb::HostSharing h = sharing("d", 1.3, 2);
  EXPECT_EQ(host_sharing_factor(h, 1), 1);
  EXPECT_DOUBLE_EQ(host_sharing_factor(h, 2), 1.3);
  EXPECT_DOUBLE_EQ(host_sharing_factor(h, 8), 1 + 0.3 * 7);
  EXPECT_DOUBLE_EQ(host_sharing_factor(sharing("d", 1.7, 8), 4), 1 + 0.7 * 3 / 7);
  // A measured speed-up applies as measured, and is not extrapolated beyond its ranks.
  EXPECT_DOUBLE_EQ(host_sharing_factor(sharing("d", 0.9, 2), 2), 0.9);
  EXPECT_DOUBLE_EQ(host_sharing_factor(sharing("d", 0.9, 2), 8), 0.9);
  EXPECT_DOUBLE_EQ(host_sharing_factor(sharing("d", 0.8, 4), 2), 1 - 0.2 / 3);
  EXPECT_EQ(host_sharing_factor(sharing("d", 0.9, 2), 1), 1);
}

struct Sims {
  double analytic = 0, des = 0;
  double compute = 0, optimizer = 0;  // the analytic breakdown's
};

Sims run(const plan::ResolvedPlan& plan, double slowdown) {
  pb::CalibrationProfile profile;
  if (slowdown > 0)
    *profile.add_host_sharing() = sharing(plan::device_of(plan, 0).name(), slowdown, 8);
  const auto [a, d] = test::simulate_both(plan, profile);
  return {a.step_time_s(), d.step_time_s(), a.breakdown().compute_s(), a.breakdown().optimizer_s()};
}

TEST(HostSharing, EveryComputeOpOfASharedHostSlowsInBothEngines) {
  // dp 8 on one DGX H100 node: every rank shares its host with 7 others, at the measured 8.
  const plan::ResolvedPlan plan = test::dgx_h100_plan(1, 8);
  const Sims alone = run(plan, 0), shared = run(plan, 1.25);
  EXPECT_NEAR(shared.compute, 1.25 * alone.compute, 1e-9 * alone.compute);
  EXPECT_NEAR(shared.optimizer, 1.25 * alone.optimizer, 1e-9 * alone.optimizer);
  // Nothing overlaps: the step grows by the compute's and the optimizer's growth, in both engines.
  const double growth = 0.25 * (alone.compute + alone.optimizer);
  EXPECT_NEAR(shared.analytic - alone.analytic, growth, 1e-6 * alone.analytic);
  EXPECT_NEAR(shared.des - alone.des, growth, 0.02 * growth);
}

TEST(HostSharing, ARankAloneOnItsHostIsUntouched) {
  // Two DGX H100 nodes cut down to one GPU each, dp 2: each rank has its host to itself.
  pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 2);
  cluster.mutable_node_types(0)->set_devices_per_node(1);
  cluster.mutable_node_types(0)->mutable_intra()->set_devices_per_pcie_switch(1);
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(4);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(2);
  p.set_micro_batch_size(1);
  const plan::ResolvedPlan plan = plan::resolve_plan(p, models::load_model("llama3-8b"), cluster);
  const Sims alone = run(plan, 0), shared = run(plan, 1.25);
  EXPECT_GT(alone.analytic, 0);
  EXPECT_DOUBLE_EQ(shared.analytic, alone.analytic);
  EXPECT_DOUBLE_EQ(shared.des, alone.des);
}

// GEMM samples on test_core_device.hpp's core: squares and matrix-vector products, each shape
// twice alone (host_ranks 1) and twice with two ranks on the host, `slowdown` times slower.
std::vector<calibration::ComputeSample> samples(double slowdown) {
  pb::ComputeCurve truth;
  truth.set_device("test-core");
  truth.set_op_class(pb::OP_CLASS_GEMM);
  truth.set_max_efficiency(0.6);
  truth.set_half_saturation_flops(2e8);
  truth.set_memory_efficiency(0.7);
  truth.set_overhead_s(15e-6);
  std::vector<calibration::ComputeSample> out;
  for (double n : {64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0}) {
    for (const bool square : {true, false}) {
      calibration::ComputeSample s;
      s.device = "test-core";
      s.op_class = pb::OP_CLASS_GEMM;
      s.flops = square ? 2 * n * n * n : 2 * n * n;
      s.bytes = square ? 12 * n * n : 4 * (2 * n + n * n);
      s.peak_flops_per_s = 100e9;
      s.memory_bytes_per_s = 20e9;
      s.shape = {square ? static_cast<int64_t>(n) : 1, static_cast<int64_t>(n),
                 static_cast<int64_t>(n)};
      s.phase = pb::PHASE_FORWARD;
      s.source = "test";
      const double t = calibration::predict_compute_seconds(truth, s);
      for (int64_t ranks : {1, 1, 2, 2}) {
        s.host_ranks = ranks;
        s.seconds = ranks == 1 ? t : t * slowdown;
        out.push_back(s);
      }
    }
  }
  return out;
}

std::map<std::string, pb::DeviceSpec> devices() { return test::test_core_devices(); }

TEST(HostSharing, FittedFromShapesMeasuredAloneAndSharedAndDividedOut) {
  const calibration::CalibrationFit fit = calibration::fit_calibration(samples(1.3), {}, devices());
  ASSERT_EQ(fit.sharing.size(), 1u);
  EXPECT_TRUE(fit.sharing[0].fitted) << fit.sharing[0].note;
  EXPECT_EQ(fit.sharing[0].shapes, 14);
  ASSERT_EQ(fit.profile.host_sharing_size(), 1);
  const pb::HostSharing& h = fit.profile.host_sharing(0);
  EXPECT_EQ(h.device(), "test-core");
  EXPECT_EQ(h.ranks(), 2);
  EXPECT_NEAR(h.slowdown(), 1.3, 1e-12);
  // The shared samples were divided by it: the curve is the one fitted where sharing cost
  // nothing (the same samples with the shared ones as fast as alone).
  const calibration::CalibrationFit same =
      calibration::fit_calibration(samples(1.0), {}, devices());
  EXPECT_EQ(same.profile.host_sharing_size(), 0);
  ASSERT_EQ(fit.profile.compute_size(), 1);
  ASSERT_EQ(same.profile.compute_size(), 1);
  const pb::ComputeCurve &c = fit.profile.compute(0), &d = same.profile.compute(0);
  EXPECT_NEAR(c.max_efficiency(), d.max_efficiency(), 1e-9 * d.max_efficiency());
  EXPECT_NEAR(c.half_saturation_flops(), d.half_saturation_flops(),
              1e-6 * (1 + d.half_saturation_flops()));
  EXPECT_NEAR(c.memory_efficiency(), d.memory_efficiency(), 1e-9 * d.memory_efficiency());
  EXPECT_NEAR(c.overhead_s(), d.overhead_s(), 1e-12);
  EXPECT_NEAR(c.max_efficiency(), 0.6, 0.01);
}

TEST(HostSharing, NothingToCompareOrNoSlowerFitsNothing) {
  std::vector<calibration::ComputeSample> shared_only;
  for (calibration::ComputeSample s : samples(1.3)) {
    if (s.host_ranks == 2) shared_only.push_back(s);
  }
  const calibration::CalibrationFit a = calibration::fit_calibration(shared_only, {}, devices());
  ASSERT_EQ(a.sharing.size(), 1u);
  EXPECT_FALSE(a.sharing[0].fitted);
  EXPECT_EQ(a.sharing[0].note,
            "0 op shape(s) measured both alone and with 2 ranks on the host, 3 needed: "
            "sharing is taken to cost nothing");
  EXPECT_EQ(a.profile.host_sharing_size(), 0);
  // Faster shared on half the shapes only (ratios 0.8 and 1.05): a median below 1, a third
  // quartile above it, nothing written.
  std::vector<calibration::ComputeSample> mixed = samples(1.0);
  for (calibration::ComputeSample& s : mixed) {
    if (s.host_ranks == 2) s.seconds *= s.shape[0] == 1 ? 0.8 : 1.05;
  }
  const calibration::CalibrationFit b = calibration::fit_calibration(mixed, {}, devices());
  ASSERT_EQ(b.sharing.size(), 1u);
  EXPECT_FALSE(b.sharing[0].fitted);
  EXPECT_NE(b.sharing[0].note.find("nor faster for three quarters"), std::string::npos)
      << b.sharing[0].note;
  EXPECT_EQ(b.profile.host_sharing_size(), 0);
}

TEST(HostSharing, ARankAloneThatRanSlowerOnEveryShapeIsWritten) {
  // Every shape ran 0.9 times as long with two ranks on the host as alone: written as measured,
  // and the shared samples divided by it describe the rank alone.
  const calibration::CalibrationFit fit = calibration::fit_calibration(samples(0.9), {}, devices());
  ASSERT_EQ(fit.sharing.size(), 1u);
  EXPECT_TRUE(fit.sharing[0].fitted) << fit.sharing[0].note;
  ASSERT_EQ(fit.profile.host_sharing_size(), 1);
  EXPECT_NEAR(fit.profile.host_sharing(0).slowdown(), 0.9, 1e-12);
  ASSERT_EQ(fit.profile.compute_size(), 1);
  EXPECT_NEAR(fit.profile.compute(0).max_efficiency(), 0.6, 0.01);
}

}  // namespace
}  // namespace orrery::sim
