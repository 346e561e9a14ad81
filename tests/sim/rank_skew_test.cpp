// The rank skew of a calibration profile (CalibrationProfile.rank_skew): how calibrate measures
// it from a trace (the waits beyond each collective's fastest member, and the compute since the
// group last waited), how it fits it, and how both engines make a group wait for its slowest
// member: (jitter + cv x compute) x expected_max_of_normals(group size).
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/calibration/calibration_samples.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

struct Sims {
  double analytic = 0, des = 0;
  double compute = 0;  // the analytic breakdown's compute (the step's, on the critical rank)
};

Sims run(const plan::ResolvedPlan& plan, const std::string& device, double cv,
         double jitter_s = 0) {
  pb::CalibrationProfile profile;
  if (cv > 0 || jitter_s > 0) {
    pb::RankSkew* k = profile.add_rank_skew();
    k->set_device(device);
    k->set_cv(cv);
    k->set_jitter_s(jitter_s);
  }
  const auto [a, d] = test::simulate_both(plan, profile);
  return {a.step_time_s(), d.step_time_s(), a.breakdown().compute_s()};
}

// Nothing overlapped, every op on the critical path: the step waits cv x e(n) x its compute,
// whether that compute is cut into segments by in-line collectives (tp) or not (dp, which waits
// once, at the gradient reduction after the last backward).
void expect_the_step_waits_for_the_slowest(const plan::ResolvedPlan& plan, int64_t group) {
  const std::string device = plan::device_of(plan, 0).name();
  const double cv = 0.05;
  const Sims none = run(plan, device, 0), skewed = run(plan, device, cv);
  const double expected = cv * base::expected_max_of_normals(group) * none.compute;
  ASSERT_GT(expected, 0);
  EXPECT_NEAR(skewed.analytic - none.analytic, expected, 1e-9 * none.analytic);
  EXPECT_NEAR(skewed.des - none.des, expected, 0.02 * expected);
  EXPECT_DOUBLE_EQ(skewed.compute, none.compute);  // the ops' own times are untouched
}

TEST(RankSkew, DataParallelWaitsOnceAfterTheStepsCompute) {
  expect_the_step_waits_for_the_slowest(test::dgx_h100_plan(1, 8), 8);
}

TEST(RankSkew, TensorParallelWaitsAtEveryInLineCollective) {
  expect_the_step_waits_for_the_slowest(test::dgx_h100_plan(8, 1), 8);
}

// tp 2 x dp 4: each TP pair waits for its slower member at every in-line collective, and the
// DP group of four for its slowest after the step's compute (the TP waits do not bring the DP
// group together: its members are in different pairs).
TEST(RankSkew, EachGroupWaitsForItsOwnSlowest) {
  const plan::ResolvedPlan plan = test::dgx_h100_plan(2, 4);
  const std::string device = plan::device_of(plan, 0).name();
  const double cv = 0.05;
  const Sims none = run(plan, device, 0), skewed = run(plan, device, cv);
  const double expected =
      cv * (base::expected_max_of_normals(2) + base::expected_max_of_normals(4)) * none.compute;
  EXPECT_NEAR(skewed.analytic - none.analytic, expected, 1e-9 * none.analytic);
  EXPECT_NEAR(skewed.des - none.des, expected, 0.02 * expected);
}

TEST(RankSkew, TheJitterIsWaitedAtEverySynchronizationAfterCompute) {
  pb::CalibrationProfile profile;
  pb::RankSkew* k = profile.add_rank_skew();
  k->set_device("d"), k->set_cv(0.05), k->set_jitter_s(200e-6);
  const ComputeCostModel model("bf16", &profile);
  pb::DeviceSpec d;
  d.set_name("d");
  EXPECT_NEAR(model.skew_wait_s(d, 2, 4e-3),
              (200e-6 + 0.05 * 4e-3) * base::expected_max_of_normals(2), 1e-15);
  EXPECT_NEAR(model.skew_wait_s(d, 8, 1e-6),
              (200e-6 + 0.05 * 1e-6) * base::expected_max_of_normals(8), 1e-15);
  EXPECT_EQ(model.skew_wait_s(d, 2, 0), 0);  // no compute since: nothing to drift
  EXPECT_EQ(model.skew_wait_s(d, 1, 4e-3), 0);

  // tp 8: the step waits the jitter at each in-line collective, in both engines alike.
  const plan::ResolvedPlan plan = test::dgx_h100_plan(8, 1);
  const std::string device = plan::device_of(plan, 0).name();
  const Sims none = run(plan, device, 0), jitter = run(plan, device, 0, 50e-6);
  const double analytic = jitter.analytic - none.analytic, des = jitter.des - none.des;
  EXPECT_GT(analytic, 10 * 50e-6 * base::expected_max_of_normals(8));  // many collectives, not one
  EXPECT_NEAR(des, analytic, 0.05 * analytic);
  EXPECT_DOUBLE_EQ(jitter.compute, none.compute);
}

TEST(RankSkew, OtherDevicesWaitForNobody) {
  const plan::ResolvedPlan plan = test::dgx_h100_plan(1, 8);
  const Sims none = run(plan, "", 0), other = run(plan, "some-other-device", 0.05);
  EXPECT_DOUBLE_EQ(other.analytic, none.analytic);
  EXPECT_DOUBLE_EQ(other.des, none.des);
}

// Two ranks on one dgx-h100 node, groups 0 and 1 both of them. Per rank, on the compute stream
// (0) unless said: compute a (10 ms), group 0's in-line all-reduce, compute b (20 ms), group 1's
// all-reduce launched on stream 1, compute c (1 ms), compute d (4 ms) that needs group 1's
// all-reduce, which was still running, then group 0's second in-line all-reduce.
pb::ExecGraph skewed_trace() {
  pb::ExecGraph g;
  g.set_world_size(2);
  *g.mutable_cluster_spec() = topologies::load_cluster("dgx-h100", 1);
  g.mutable_plan()->mutable_job()->set_precision(pb::PRECISION_BF16);
  for (int64_t id : {0, 1}) {
    pb::ProcessGroup* group = g.add_process_groups();
    group->set_id(id);
    group->add_ranks(0);
    group->add_ranks(1);
  }
  for (int64_t r = 0; r < 2; ++r) {
    pb::RankGraph& rank = *g.add_ranks();
    rank.set_rank(r);
    rank.set_device(r);
    auto add = [&](const char* name, pb::NodeKind kind, double start_ms,
                   double ms) -> pb::ExecNode& {
      pb::ExecNode& n = *rank.add_nodes();
      n.set_id(rank.nodes_size() - 1);
      n.set_name(name);
      n.set_kind(kind);
      n.set_start_s(start_ms * 1e-3);
      n.set_duration_s(ms * 1e-3);
      if (kind == pb::NODE_KIND_COMPUTE) {
        n.set_op_class(pb::OP_CLASS_GEMM);
        n.set_flops(1e12);
      } else {
        n.set_collective(pb::COLLECTIVE_KIND_ALL_REDUCE);
        n.set_comm_bytes(1e6);
      }
      return n;
    };
    add("a", pb::NODE_KIND_COMPUTE, 0, 10);
    add("tp.first", pb::NODE_KIND_COLLECTIVE, 10, r == 0 ? 3 : 1);  // rank 0 waited 2 ms
    add("b", pb::NODE_KIND_COMPUTE, 13, 20);
    pb::ExecNode& dp = add("dp.bucket", pb::NODE_KIND_COLLECTIVE, 33, r == 0 ? 5 : 2);  // 3 ms
    dp.set_process_group(1);
    dp.set_stream(1);
    add("c", pb::NODE_KIND_COMPUTE, 34, 1);
    add("d", pb::NODE_KIND_COMPUTE, 38, 4).add_data_deps(dp.id());
    add("tp.second", pb::NODE_KIND_COLLECTIVE, 42, 1);  // nobody waited
  }
  return g;
}

const calibration::SkewSample& sample(const calibration::TraceSamples& out,
                                      const std::string& name) {
  for (const auto& s : out.skew) {
    if (s.source == "t.json: " + name) return s;
  }
  ADD_FAILURE() << "no skew sample for " << name;
  return out.skew.front();
}

TEST(RankSkew, SamplesAreTheWaitsAndTheComputeSinceTheGroupLastWaited) {
  calibration::TraceSamples out;
  calibration::add_trace_samples(skewed_trace(), "t.json", {}, out);
  ASSERT_EQ(out.skew.size(), 3u);
  const calibration::SkewSample& first = sample(out, "tp.first");
  EXPECT_EQ(first.device, "H100-SXM");
  EXPECT_EQ(first.ranks, 2);
  EXPECT_NEAR(first.wait_s, 1e-3, 1e-12);  // (2 + 0) / 2 ms
  EXPECT_NEAR(first.compute_s, 10e-3, 1e-12);
  // Group 1 was never waited on: all 30 ms of compute so far.
  const calibration::SkewSample& dp = sample(out, "dp.bucket");
  EXPECT_NEAR(dp.wait_s, 1.5e-3, 1e-12);
  EXPECT_NEAR(dp.compute_s, 30e-3, 1e-12);
  // Group 0 was last waited on after a: b, c and d since (waiting on group 1 does not count).
  const calibration::SkewSample& second = sample(out, "tp.second");
  EXPECT_NEAR(second.wait_s, 0, 1e-12);
  EXPECT_NEAR(second.compute_s, 25e-3, 1e-12);
}

TEST(RankSkew, ACollectiveNotTimedOnEveryMemberIsNoSample) {
  pb::ExecGraph g = skewed_trace();
  g.mutable_ranks(1)->mutable_nodes(1)->clear_duration_s();
  calibration::TraceSamples out;
  calibration::add_trace_samples(g, "t.json", {}, out);
  EXPECT_EQ(out.skew.size(), 2u);
}

TEST(RankSkew, TheFitMakesTheEnginesWaitsAddUpToTheMeasuredOnes) {
  calibration::TraceSamples out;
  calibration::add_trace_samples(skewed_trace(), "t.json", {}, out);
  calibration::CalibrationFit fit;
  calibration::fit_rank_skew(out.skew, {}, fit);
  ASSERT_EQ(fit.skew.size(), 1u);
  ASSERT_TRUE(fit.skew[0].fitted) << fit.skew[0].note;
  const double cv = 2.5e-3 / (65e-3 * base::expected_max_of_normals(2));
  EXPECT_NEAR(fit.skew[0].cv, cv, 1e-12);
  EXPECT_EQ(fit.skew[0].samples, 3);
  ASSERT_EQ(fit.profile.rank_skew_size(), 1);
  EXPECT_EQ(fit.profile.rank_skew(0).device(), "H100-SXM");
  EXPECT_NEAR(fit.profile.rank_skew(0).cv(), cv, 1e-12);
  // The quartiles of the samples' own cv: 0, 1/10 and 1.5/30 ms per ms, over e(2).
  EXPECT_NEAR(fit.skew[0].q1, 0.025 / base::expected_max_of_normals(2), 1e-12);
  EXPECT_NEAR(fit.skew[0].q3, 0.075 / base::expected_max_of_normals(2), 1e-12);
}

TEST(RankSkew, AJitterThatComputeDoesNotExplainIsFittedBesideTheCv) {
  // Two-rank collectives after 0.5-8 ms of compute (a TP plan's) and after 200 ms (a gradient
  // reduction), waiting e(2) x (150 us + 0.03 x compute), give or take 20%.
  std::vector<calibration::SkewSample> samples;
  const double e = base::expected_max_of_normals(2);
  int i = 0;
  for (double c : {0.5e-3, 1e-3, 2e-3, 3e-3, 4e-3, 6e-3, 8e-3, 200e-3}) {
    for (double noise : {0.8, 1.0, 1.2, 0.9, 1.1}) {
      samples.push_back({"cpu", 2, e * (150e-6 + 0.03 * c) * noise, c, "s" + std::to_string(i++)});
    }
  }
  calibration::CalibrationFit fit;
  calibration::fit_rank_skew(samples, {}, fit);
  ASSERT_EQ(fit.skew.size(), 1u);
  ASSERT_TRUE(fit.skew[0].fitted) << fit.skew[0].note;
  EXPECT_NEAR(fit.skew[0].jitter_s, 150e-6, 15e-6);
  EXPECT_NEAR(fit.skew[0].cv, 0.03, 0.003);
  ASSERT_EQ(fit.profile.rank_skew_size(), 1);
  EXPECT_DOUBLE_EQ(fit.profile.rank_skew(0).jitter_s(), fit.skew[0].jitter_s);
  // With the jitter, the engines' waits still add up to the measured ones.
  double measured = 0, predicted = 0;
  for (const calibration::SkewSample& s : samples) {
    measured += s.wait_s;
    predicted += e * (fit.skew[0].jitter_s + fit.skew[0].cv * s.compute_s);
  }
  EXPECT_NEAR(predicted, measured, 1e-9 * measured);

  // Waits proportional to compute alone: no jitter, the cv of the sums as before.
  std::vector<calibration::SkewSample> proportional;
  for (double c : {0.5e-3, 1e-3, 2e-3, 4e-3, 8e-3, 200e-3}) {
    for (double noise : {0.8, 1.0, 1.2})
      proportional.push_back({"cpu", 2, e * 0.05 * c * noise, c, "p"});
  }
  calibration::CalibrationFit plain;
  calibration::fit_rank_skew(proportional, {}, plain);
  ASSERT_TRUE(plain.skew[0].fitted) << plain.skew[0].note;
  EXPECT_EQ(plain.skew[0].jitter_s, 0);
  EXPECT_EQ(plain.profile.rank_skew(0).jitter_s(), 0);
}

TEST(RankSkew, NoWaitsOrTooFewSamplesWriteNothing) {
  std::vector<calibration::SkewSample> none_waited(
      4, calibration::SkewSample{"H100-SXM", 2, 0, 10e-3, "x"});
  calibration::CalibrationFit fit;
  calibration::fit_rank_skew(none_waited, {}, fit);
  ASSERT_EQ(fit.skew.size(), 1u);
  EXPECT_FALSE(fit.skew[0].fitted);
  EXPECT_NE(fit.skew[0].note.find("ever waited"), std::string::npos) << fit.skew[0].note;
  EXPECT_EQ(fit.profile.rank_skew_size(), 0);

  calibration::CalibrationFit few;
  calibration::fit_rank_skew({calibration::SkewSample{"H100-SXM", 2, 1e-3, 10e-3, "x"}}, {}, few);
  EXPECT_FALSE(few.skew[0].fitted);
  EXPECT_NE(few.skew[0].note.find("1 collective(s)"), std::string::npos) << few.skew[0].note;
  EXPECT_EQ(few.profile.rank_skew_size(), 0);
}

}  // namespace
}  // namespace orrery::sim
