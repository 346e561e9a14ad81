// validate_trace on a "measured" trace made from the lowering itself, every node timed at a known
// multiple of what the cost models predict: the comparison must report exactly those multiples,
// and refuse traces whose nodes differ from the lowering's.
#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/validation/trace_validation.hpp"

namespace orrery::sim {
namespace {

// tiny on one DGX A100: tp 2, pp 2, dp 2, 4 micro-batches of 1 x 64 tokens.
pb::Plan tiny_plan() {
  pb::Plan p;
  p.set_model("tiny");
  p.set_cluster("dgx-a100");
  p.set_nodes(1);
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(64);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_pp(2);
  p.mutable_parallel()->set_dp(2);
  p.set_micro_batch_size(1);
  return p;
}

// The lowering of the plan, every node "measured" at `factor` x its cost-model time (compute
// and communication alike), as `orrery run --out` would write it.
pb::ExecGraph fake_measurement(double factor, double step_s) {
  const pb::Plan plan = tiny_plan();
  const pb::ModelSpec model = models::preset("tiny");
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-a100", 1);
  pb::ExecGraph g = plan::lower(plan::resolve_plan(plan, model, cluster));
  *g.mutable_plan() = plan;
  *g.mutable_model_spec() = model;
  *g.mutable_cluster_spec() = cluster;
  g.set_measured_step_s(step_s);
  // A first pass with duration 1 s everywhere tells each node's predicted time.
  for (auto& r : *g.mutable_ranks()) {
    for (auto& n : *r.mutable_nodes()) n.set_duration_s(1);
  }
  const validation::TraceValidation unit =
      validation::validate_trace(g, "t.json", EngineKind::kAnalytic, nullptr);
  size_t i = 0;
  for (auto& r : *g.mutable_ranks()) {
    for (auto& n : *r.mutable_nodes()) n.set_duration_s(unit.nodes[i++].predicted_s * factor);
  }
  return g;
}

TEST(TraceValidation, ReportsTheKnownErrors) {
  // Measured 25% slower than predicted everywhere: every group's error is 1 / 1.25 - 1 = -20%.
  const pb::ExecGraph trace = fake_measurement(1.25, 0.5);
  const validation::TraceValidation v =
      validation::validate_trace(trace, "t.json", EngineKind::kAnalytic, nullptr);
  EXPECT_EQ(v.ranks, 8);
  ASSERT_FALSE(v.op_classes.empty());
  for (const auto& g : v.op_classes) {
    EXPECT_NEAR(g.error, -0.2, 1e-12) << g.name;
    EXPECT_NEAR(g.median_abs_error, 0.2, 1e-12) << g.name;
  }
  std::vector<std::string> comm;
  for (const auto& g : v.collectives) {
    comm.push_back(g.name);
    EXPECT_NEAR(g.error, -0.2, 1e-12) << g.name;
  }
  // TP all-reduces in the layers and DP gradient all-reduces; pipeline sends and receives.
  EXPECT_EQ(comm, (std::vector<std::string>{"all_reduce", "send", "recv"}));
  EXPECT_EQ(v.op_classes.front().name, "gemm");
  // The step: the analytic engine's prediction against the trace's measured_step_s.
  EXPECT_DOUBLE_EQ(v.measured_step_s, 0.5);
  EXPECT_GT(v.predicted_step_s, 0);
  EXPECT_DOUBLE_EQ(v.step_error, v.predicted_step_s / 0.5 - 1);
}

// With a calibrated rank skew a collective's prediction carries the expected wait for its
// group's slowest member: cv x e(n) x the predicted compute since the rank last waited on it.
TEST(TraceValidation, CollectivesCarryTheExpectedWaitForTheSlowestMember) {
  pb::ExecGraph trace = fake_measurement(1.0, 0.5);
  for (auto& r : *trace.mutable_ranks()) {  // one node after another, in the lowering's order
    double t = 0;
    for (auto& n : *r.mutable_nodes()) n.set_start_s(t), t += n.duration_s();
  }
  pb::CalibrationProfile profile;
  pb::RankSkew* k = profile.add_rank_skew();
  k->set_device(trace.cluster_spec().node_types(0).device());
  k->set_cv(0.1);
  const validation::TraceValidation plain =
      validation::validate_trace(trace, "t.json", EngineKind::kAnalytic, nullptr);
  const validation::TraceValidation skewed =
      validation::validate_trace(trace, "t.json", EngineKind::kAnalytic, &profile);
  ASSERT_EQ(plain.nodes.size(), skewed.nodes.size());
  // Rank 0's first collective on its compute stream (a TP all-reduce, the pair's first): it
  // waits for the compute before it. Compute nodes keep their prediction.
  const pb::RankGraph& rank0 = trace.ranks(0);
  double before = 0;
  bool found = false;
  for (int i = 0; i < rank0.nodes_size() && !found; ++i) {
    const pb::ExecNode& n = rank0.nodes(i);
    if (n.kind() == pb::NODE_KIND_COMPUTE) {
      EXPECT_DOUBLE_EQ(skewed.nodes[static_cast<size_t>(i)].predicted_s,
                       plain.nodes[static_cast<size_t>(i)].predicted_s);
      before += plain.nodes[static_cast<size_t>(i)].predicted_s;
    } else if (n.kind() == pb::NODE_KIND_COLLECTIVE && n.stream() == plan::kCompute) {
      found = true;
      EXPECT_NEAR(skewed.nodes[static_cast<size_t>(i)].predicted_s -
                      plain.nodes[static_cast<size_t>(i)].predicted_s,
                  0.1 * base::expected_max_of_normals(2) * before, 1e-12)
          << n.name();
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GT(before, 0);
}

TEST(TraceValidation, DesGivesTheTimelineOfEveryRank) {
  const pb::ExecGraph trace = fake_measurement(1.0, 0.5);
  const validation::TraceValidation v =
      validation::validate_trace(trace, "t.json", EngineKind::kDes, nullptr);
  EXPECT_EQ(v.predicted_timeline.ranks_size(), 8);
  for (const auto& g : v.op_classes) EXPECT_NEAR(g.error, 0, 1e-12) << g.name;
  EXPECT_GT(v.predicted_step_s, 0);
}

TEST(TraceValidation, NamesTheFirstNodeTheTwoDoNotShare) {
  pb::ExecGraph trace = fake_measurement(1.0, 0.5);
  pb::ExecGraph renamed = trace;
  const std::string name = renamed.ranks(1).nodes(3).name();
  renamed.mutable_ranks(1)->mutable_nodes(3)->set_name("L0.mb0.fwd.mystery");
  try {
    validation::validate_trace(renamed, "t.json", EngineKind::kAnalytic, nullptr);
    FAIL() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()), "t.json: ranks[1].nodes[3].name: node " +
                                         std::to_string(trace.ranks(1).nodes(3).id()) +
                                         " of rank 1 is 'L0.mb0.fwd.mystery' in the trace but '" +
                                         name + "' in the lowering of its plan");
  }
  pb::ExecGraph missing = trace;
  const pb::ExecNode first = missing.ranks(0).nodes(0);
  missing.mutable_ranks(0)->mutable_nodes()->erase(
      missing.mutable_ranks(0)->mutable_nodes()->begin());
  try {
    validation::validate_trace(missing, "t.json", EngineKind::kAnalytic, nullptr);
    FAIL() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.json: ranks[0].nodes: rank 0 has no node " + std::to_string(first.id()) + " '" +
                  first.name() +
                  "', which the lowering of the trace's plan has: the executor "
                  "and the simulator disagree about what the plan runs");
  }
}

TEST(TraceValidation, NeedsAMeasuredRun) {
  pb::ExecGraph trace = fake_measurement(1.0, 0.5);
  trace.clear_plan();
  try {
    validation::validate_trace(trace, "t.json", EngineKind::kAnalytic, nullptr);
    FAIL() << "accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.json: plan: missing: validate --trace needs a measured run's trace (`orrery run "
              "--out DIR` writes "
              "DIR/trace.json, which carries the plan, model and cluster it ran and its measured "
              "step time)");
  }
}

}  // namespace
}  // namespace orrery::sim
