// Per-stage tensor- and data-parallel degrees on heterogeneous clusters: the space holds them,
// the plans they become resolve and fit, the search finds them where they beat every uniform
// plan, and the result is the same bytes with 1 and 2 threads.
#include <gtest/gtest.h>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/planner/explain.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"
#include "test_paths.hpp"

namespace orrery::planner {
namespace {

// One DGX A100 + two DGX H100 nodes (tests/inputs/planner/mixed-1a100-2h100.yaml).
const std::string kCluster = std::string(ORRERY_TEST_INPUTS) + "/planner/mixed-1a100-2h100.yaml";

struct Fixture {
  explicit Fixture(SpaceOptions options, int64_t gbs = 64)
      : job(make_job(gbs)),
        topology(job.cluster),
        costs(topology, "bf16"),
        engine(costs),
        space(job, std::move(options)) {}

  static PlanningJob make_job(int64_t gbs) {
    PlanningJob j;
    j.model = models::load_model("llama3-8b");
    j.cluster = topologies::load_cluster(kCluster, std::nullopt);
    j.base.set_model("llama3-8b");
    j.base.set_cluster(kCluster);
    j.base.mutable_job()->set_global_batch_size(gbs);
    j.base.mutable_job()->set_seq_len(4096);
    j.base.mutable_job()->set_precision(pb::PRECISION_BF16);
    return j;
  }

  PlanningJob job;
  topologies::Topology topology;
  sim::CostModels costs;
  AnalyticEngine engine;
  PlanSpace space;
};

SpaceOptions options(bool stage_degrees) {
  SpaceOptions o;
  o.placements = {""};
  o.bucket_bytes = {0};
  o.max_micro_batch = 2;
  o.stage_degrees = stage_degrees;
  return o;
}

TEST(StageDegreesSpace, ShapesPutWholeStagesOnEachGroupWithTheirOwnDegrees) {
  Fixture f(options(true));
  int staged = 0;
  for (const Shape& s : f.space.shapes()) {
    if (s.stage_tp.empty()) continue;
    ++staged;
    ASSERT_EQ(static_cast<int64_t>(s.stage_tp.size()), s.pp);
    ASSERT_EQ(static_cast<int64_t>(s.stage_groups.size()), s.pp);
    // Each group's devices are exactly covered by its stages; dp is the largest stage dp.
    int64_t a100 = 0, h100 = 0, largest = 0;
    for (int64_t i = 0; i < s.pp; ++i) {
      const int64_t n = s.stage_tp[static_cast<size_t>(i)] * s.stage_dp[static_cast<size_t>(i)];
      (s.stage_groups[static_cast<size_t>(i)] == "a100" ? a100 : h100) += n;
      largest = std::max(largest, s.stage_dp[static_cast<size_t>(i)]);
      EXPECT_EQ(s.dp % s.stage_dp[static_cast<size_t>(i)], 0);
    }
    EXPECT_EQ(a100, 8);
    EXPECT_EQ(h100, 16);
    EXPECT_EQ(s.dp, largest);
  }
  EXPECT_GT(staged, 10);
  // Off: no shape has per-stage degrees.
  Fixture off(options(false));
  for (const Shape& s : off.space.shapes()) EXPECT_TRUE(s.stage_tp.empty());
}

// The 24 GPUs split 8 + 16: uniform stages must be 8 devices each (pp >= 3); per-stage degrees
// allow pp 2 with a 16-GPU H100 stage (dp 16) and an 8-GPU A100 stage (dp 8, two of each
// pipeline micro-batch's 16 sequences per replica), whose shorter pipeline wins at global
// batch 256 (at 64 the uniform tp1 pp3 dp4 cp2 plan is faster: 1.300 s against 1.356 s).
TEST(StageDegreesSearch, BeatsTheBestUniformPlanAndTheSearchFindsIt) {
  SearchOptions o;
  o.threads = 2;
  Fixture with(options(true), 256);
  const SearchResult best = search(with.space, with.engine, o);
  Fixture without(options(false), 256);
  const SearchResult uniform = search(without.space, without.engine, o);
  ASSERT_FALSE(best.ranked.empty());
  ASSERT_FALSE(uniform.ranked.empty());
  const RankedPlan& top = best.ranked.front();
  std::printf("per-stage: %s  %.4f s\nuniform:   %s  %.4f s\n", plan_label(top).c_str(),
              top.eval.step_time_s(), plan_label(uniform.ranked.front()).c_str(),
              uniform.ranked.front().eval.step_time_s());
  EXPECT_FALSE(top.knobs.stage_tp.empty()) << plan_label(top);
  EXPECT_LT(top.eval.step_time_s(), uniform.ranked.front().eval.step_time_s());
  // The plan file carries the stages' degrees, resolves as written, and fits.
  EXPECT_EQ(top.plan.stage_tp_size(), top.knobs.pp);
  EXPECT_FALSE(top.plan.parallel().has_tp());
  const plan::ResolvedPlan r = plan::resolve_plan(top.plan, with.job.model, with.job.cluster);
  EXPECT_FALSE(r.uniform_stages());
  for (const auto& m : top.eval.result.memory()) EXPECT_FALSE(m.oom());
  // The label reads stage by stage.
  EXPECT_NE(plan_label(top).find("|"), std::string::npos);
}

TEST(StageDegreesSearch, SameBytesWithOneAndTwoThreads) {
  auto run = [](int threads) {
    Fixture f(options(true));
    SearchOptions o;
    o.threads = threads;
    std::string s;
    for (const auto& p : search(f.space, f.engine, o).ranked)
      s += knob_key(p.knobs) + "\n" + to_json(p.plan) + to_json(p.eval.result);
    return s;
  };
  const std::string one = run(1);
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(one, run(2));
}

}  // namespace
}  // namespace orrery::planner
