// Curves per op (ComputeCurve.op, .phase): the cost model prices an op's pass with its own curve
// where the profile has one, else with its class's; calibrate fits one, as its class's curve
// scaled plus an overhead of its own, for each op and pass of a class of several that it measured
// at two sizes or more; both engines use it.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "test_core_device.hpp"

namespace orrery::sim {
namespace {

pb::ComputeCurve memory_curve(double memory_efficiency, double overhead_s) {
  pb::ComputeCurve c;
  c.set_device("test-core");
  c.set_op_class(pb::OP_CLASS_ELEMENTWISE);
  c.set_max_efficiency(0.25);
  c.set_memory_efficiency(memory_efficiency);
  c.set_overhead_s(overhead_s);
  return c;
}

TEST(OpCurves, AnOpsPassIsPricedByItsOwnCurveElseByItsClasss) {
  pb::CalibrationProfile profile;
  *profile.add_compute() = memory_curve(0.5, 0);
  pb::ComputeCurve rope = memory_curve(0.25, 1e-3);
  rope.set_op("attn.rope");
  rope.set_phase(pb::PHASE_FORWARD);
  *profile.add_compute() = rope;
  pb::ComputeCurve act = memory_curve(1.0, 2e-3);  // both passes
  act.set_op("mlp.act");
  *profile.add_compute() = act;
  pb::ComputeCurve norm = memory_curve(0.1, 3e-3);  // written as recomputation: the forward pass
  norm.set_op("mlp.norm");
  norm.set_phase(pb::PHASE_RECOMPUTE);
  *profile.add_compute() = norm;
  const ComputeCostModel model("fp32", &profile);
  const pb::DeviceSpec device = test::test_core();
  const double bytes = 1e6, bw = device.memory_bandwidth_bytes_per_s();
  const auto at = [&](const char* op, pb::Phase phase) {
    return model.seconds(device, pb::OP_CLASS_ELEMENTWISE, 0, bytes, {}, phase, op);
  };
  EXPECT_DOUBLE_EQ(at("attn.rope", pb::PHASE_FORWARD), 1e-3 + bytes / (bw * 0.25));
  EXPECT_DOUBLE_EQ(at("attn.rope", pb::PHASE_RECOMPUTE),
                   1e-3 + bytes / (bw * 0.25));                               // a forward again
  EXPECT_DOUBLE_EQ(at("attn.rope", pb::PHASE_BACKWARD), bytes / (bw * 0.5));  // no backward curve
  EXPECT_DOUBLE_EQ(at("mlp.act", pb::PHASE_BACKWARD), 2e-3 + bytes / bw);
  EXPECT_DOUBLE_EQ(at("mlp.residual", pb::PHASE_FORWARD), bytes / (bw * 0.5));
  EXPECT_DOUBLE_EQ(at("mlp.norm", pb::PHASE_FORWARD), 3e-3 + bytes / (bw * 0.1));
  EXPECT_DOUBLE_EQ(at("mlp.norm", pb::PHASE_BACKWARD), bytes / (bw * 0.5));
  EXPECT_DOUBLE_EQ(at("", pb::PHASE_FORWARD), bytes / (bw * 0.5));
  // Another class's op of the same name is not priced by it.
  EXPECT_EQ(ComputeCostModel::calibrated_curve(profile, "test-core", pb::OP_CLASS_NORM, "attn.rope",
                                               pb::PHASE_FORWARD),
            nullptr);
}

// Memory-bound samples of class `elementwise` on the test core: `op` in `phase`, `elements` of 4
// bytes read and written, timed `overhead_s` + `scale` x the bytes at `memory_efficiency`.
std::vector<calibration::ComputeSample> op_samples(const std::string& op, pb::Phase phase,
                                                   std::vector<int64_t> elements,
                                                   double memory_efficiency, double scale,
                                                   double overhead_s) {
  const pb::DeviceSpec device = test::test_core();
  std::vector<calibration::ComputeSample> out;
  for (int64_t n : elements) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      calibration::ComputeSample s;
      s.device = "test-core";
      s.op_class = pb::OP_CLASS_ELEMENTWISE;
      s.op = op;
      s.bytes = 8.0 * static_cast<double>(n);
      s.peak_flops_per_s = device.peak_flops().fp32();
      s.memory_bytes_per_s = device.memory_bandwidth_bytes_per_s();
      s.seconds = overhead_s + scale * s.bytes / (s.memory_bytes_per_s * memory_efficiency);
      s.shape = {n};
      s.phase = phase;
      s.host_ranks = 1;
      s.source = "test: " + op;
      out.push_back(s);
    }
  }
  return out;
}

const pb::ComputeCurve* find(const pb::CalibrationProfile& p, const std::string& op,
                             pb::Phase phase) {
  for (const auto& c : p.compute()) {
    if (c.op() == op && c.phase() == phase) return &c;
  }
  return nullptr;
}

TEST(OpCurves, CalibrateFitsAnOpsScaleAndOverheadOverItsClasssCurve) {
  // A single-kernel add at the class's bandwidth, and a RoPE three times as slow per byte with
  // 200 us of launches of its own, both forward at four sizes; the RoPE's backward at one size.
  std::vector<calibration::ComputeSample> samples =
      op_samples("add", pb::PHASE_FORWARD, {1 << 14, 1 << 16, 1 << 18, 1 << 20}, 0.6, 1, 0);
  for (const auto& s : op_samples("attn.rope", pb::PHASE_FORWARD,
                                  {1 << 14, 1 << 16, 1 << 18, 1 << 20}, 0.6, 3, 200e-6))
    samples.push_back(s);
  for (const auto& s : op_samples("attn.rope", pb::PHASE_BACKWARD, {1 << 16}, 0.6, 5, 300e-6))
    samples.push_back(s);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(samples, {}, test::test_core_devices());

  const pb::ComputeCurve* of_class = find(fit.profile, "", pb::PHASE_UNSPECIFIED);
  const pb::ComputeCurve* rope = find(fit.profile, "attn.rope", pb::PHASE_FORWARD);
  ASSERT_NE(of_class, nullptr);
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(rope->op_class(), pb::OP_CLASS_ELEMENTWISE);
  // The class's time beyond its overhead is linear in bytes, so the RoPE comes back exactly.
  EXPECT_NEAR(rope->overhead_s(), 200e-6, 1e-9);
  EXPECT_NEAR(rope->memory_efficiency(), 0.6 / 3, 1e-6);
  EXPECT_LT(rope->fit().max_abs_rel_error(), 1e-6);
  EXPECT_EQ(rope->fit().samples(), 8);
  // The class's curve is untouched by its ops' curves; it comes first.
  EXPECT_EQ(&fit.profile.compute(0), of_class);
  EXPECT_EQ(of_class->fit().samples(), 18);
  // One size of the RoPE's backward tells no overhead from a scale: its class's curve prices it.
  EXPECT_EQ(find(fit.profile, "attn.rope", pb::PHASE_BACKWARD), nullptr);
  ASSERT_EQ(fit.op_curves.size(), 2u);  // add and attn.rope forward
  EXPECT_EQ(fit.op_curves[1].op, "attn.rope forward");
  EXPECT_TRUE(fit.op_curves[1].fitted);

  // The engines' model prices the RoPE's forward by its curve, its backward by the class's.
  const ComputeCostModel model("fp32", &fit.profile);
  const pb::DeviceSpec device = test::test_core();
  for (const calibration::ComputeSample& s : samples) {
    if (s.op != "attn.rope" || s.phase != pb::PHASE_FORWARD) continue;
    EXPECT_NEAR(model.seconds(device, s.op_class, 0, s.bytes, s.shape, s.phase, s.op), s.seconds,
                1e-6 * s.seconds);
  }
}

TEST(OpCurves, AnOpWhoseTimeDoesNotGrowWithItsSizeIsItsOverhead) {
  // An add's backward only passes its gradient on: 11 us whatever its size.
  std::vector<calibration::ComputeSample> samples =
      op_samples("add", pb::PHASE_FORWARD, {1 << 14, 1 << 16, 1 << 18}, 0.6, 1, 5e-6);
  for (auto s : op_samples("add", pb::PHASE_BACKWARD, {1 << 14, 1 << 16, 1 << 18}, 0.6, 0, 11e-6))
    samples.push_back(s);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(samples, {}, test::test_core_devices());
  const pb::ComputeCurve* flat = find(fit.profile, "add", pb::PHASE_BACKWARD);
  ASSERT_NE(flat, nullptr);
  EXPECT_NEAR(flat->overhead_s(), 11e-6, 0.02 * 11e-6);
  const auto report =
      std::find_if(fit.op_curves.begin(), fit.op_curves.end(),
                   [](const calibration::CurveReport& r) { return r.op == "add backward"; });
  ASSERT_NE(report, fit.op_curves.end());
  ASSERT_EQ(report->held.size(), 1u);
  EXPECT_EQ(report->held[0].name, "time_scale");
  EXPECT_EQ(report->held[0].reason, "the samples push it to its floor");
}

TEST(OpCurves, OneOpInOnePassIsItsClass) {
  // Only the add's forward: the class's curve is its curve, and nothing more is written.
  const auto samples =
      op_samples("add", pb::PHASE_FORWARD, {1 << 14, 1 << 16, 1 << 18}, 0.6, 1, 5e-6);
  const calibration::CalibrationFit fit =
      calibration::fit_calibration(samples, {}, test::test_core_devices());
  ASSERT_EQ(fit.profile.compute_size(), 1);
  EXPECT_TRUE(fit.profile.compute(0).op().empty());
  EXPECT_TRUE(fit.op_curves.empty());
}

TEST(OpCurves, BothEnginesPriceAnOpsPassByItsCurve) {
  // dp 8 on one DGX H100: 32 layers x 2 micro-batches, so 64 RoPE forwards on every rank's
  // critical path. A curve of its own for the RoPE's forward, the class's default plus 1 ms,
  // adds 64 ms to each engine's step and nothing to its backward.
  const plan::ResolvedPlan plan = test::dgx_h100_plan(1, 8);
  const pb::DeviceSpec& device = plan::device_of(plan, 0);
  pb::ComputeCurve rope =
      ComputeCostModel(plan.precision.dtype).curve(device, pb::OP_CLASS_ELEMENTWISE);
  rope.set_op("attn.rope");
  rope.set_phase(pb::PHASE_FORWARD);
  rope.set_overhead_s(rope.overhead_s() + 1e-3);
  pb::CalibrationProfile with;
  *with.add_compute() = rope;
  const auto base = test::simulate_both(plan, pb::CalibrationProfile());
  const auto own = test::simulate_both(plan, with);
  EXPECT_NEAR(own.analytic.breakdown().compute_s() - base.analytic.breakdown().compute_s(), 64e-3,
              1e-9);
  EXPECT_NEAR(own.analytic.step_time_s() - base.analytic.step_time_s(), 64e-3, 1e-6);
  EXPECT_NEAR(own.des.step_time_s() - base.des.step_time_s(), 64e-3, 0.02 * 64e-3);
}

}  // namespace
}  // namespace orrery::sim
