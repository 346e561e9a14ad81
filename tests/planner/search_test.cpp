#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/planner/explain.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::planner {
namespace {

// A job, its topology and cost models, and the analytic engine, kept alive together.
struct Fixture {
  Fixture(const std::string& model, const std::string& cluster, int64_t nodes, int64_t gbs,
          int64_t seq, SpaceOptions options = {})
      : job(make_job(model, cluster, nodes, gbs, seq)),
        topology(job.cluster),
        costs(topology, "bf16"),
        engine(costs),
        space(job, std::move(options)) {}

  static PlanningJob make_job(const std::string& model, const std::string& cluster, int64_t nodes,
                              int64_t gbs, int64_t seq) {
    PlanningJob j;
    j.model = models::load_model(model);
    j.cluster = topologies::load_cluster(cluster, nodes);
    j.base.set_model(model);
    j.base.set_cluster(cluster);
    j.base.set_nodes(nodes);
    j.base.mutable_job()->set_global_batch_size(gbs);
    j.base.mutable_job()->set_seq_len(seq);
    j.base.mutable_job()->set_precision(pb::PRECISION_BF16);
    return j;
  }

  PlanningJob job;
  topologies::Topology topology;
  sim::CostModels costs;
  AnalyticEngine engine;
  PlanSpace space;
};

// A space small enough to enumerate: llama3-8b on 2 DGX H100 nodes (16 GPUs), one placement and
// bucket size.
SpaceOptions small_space() {
  SpaceOptions o;
  o.placements = {""};
  o.bucket_bytes = {0};
  o.max_micro_batch = 4;
  return o;
}

std::string ranking_bytes(const SearchResult& r) {
  std::string s;
  for (const auto& p : r.ranked) {
    s += knob_key(p.knobs) + "\n" + to_json(p.plan) + to_json(p.eval.result);
  }
  return s;
}

TEST(PlanSpace, SmallSpaceIsEnumerable) {
  Fixture f("llama3-8b", "dgx-h100", 2, 64, 4096, small_space());
  const auto points = all_points(f.space);
  EXPECT_GT(points.size(), 500u);
  EXPECT_LT(points.size(), 6000u);
  for (const auto& k : points) EXPECT_EQ(k.tp * k.pp * k.dp * k.cp, 16);
}

// MoE models: the shapes hold unfolded layouts (ep inside dp x cp, etp 0) and folded ones
// (etp 1 or tp, ep x etp dividing tp x cp x dp), and each folded shape's plan file says its etp.
// mixtral-8x7b on one DGX H100: tp 2, dp 4 may fold ep 8 at etp 1 (unfolded, ep stops at 4) and
// ep 4 at etp 2; a dense model gets no etp.
TEST(PlanSpace, MoeShapesIncludeFoldedExpertLayouts) {
  SpaceOptions o = small_space();
  o.pp = {1};
  o.cp = {1};
  Fixture f("mixtral-8x7b", "dgx-h100", 1, 8, 4096, o);
  std::set<std::tuple<int64_t, int64_t, int64_t>> tp2;  // (ep, etp, dp) at tp 2
  for (const auto& s : f.space.shapes()) {
    if (s.etp > 0) EXPECT_EQ(s.tp * s.cp * s.dp % (s.ep * s.etp), 0);
    if (s.etp == 0) EXPECT_EQ(s.dp * s.cp % s.ep, 0);
    if (s.tp == 2) tp2.insert({s.ep, s.etp, s.dp});
  }
  EXPECT_TRUE(tp2.count({4, 0, 4}));
  EXPECT_FALSE(tp2.count({8, 0, 4}));
  EXPECT_TRUE(tp2.count({8, 1, 4}));
  EXPECT_TRUE(tp2.count({4, 2, 4}));
  Knobs k =
      f.space.seed({2, 1, 4, 1, 8, 1, {}, {}, {}, 1}, 1, pb::SHARDING_NONE, 0, pb::RECOMPUTE_NONE);
  const pb::Plan plan = f.space.plan(k);
  EXPECT_EQ(plan.parallel().etp(), 1);
  EXPECT_EQ(plan.parallel().ep(), 8);
  Fixture dense("llama3-8b", "dgx-h100", 1, 8, 4096, o);
  for (const auto& s : dense.space.shapes()) EXPECT_EQ(s.etp, 0);
  EXPECT_EQ(expert_layouts_note(dense.job.model, o), "");
  EXPECT_NE(expert_layouts_note(f.job.model, o).find("folded"), std::string::npos);
}

// moe_a2a_overlap is a searched setting: the settings of an MoE shape with ep > 1 try it on and
// off (never with full recomputation or FSDP), a dense model's never; the plan file says what the
// knob says, whatever the base plan stated.
TEST(PlanSpace, MoeA2aOverlapIsSearchedWhereAllowed) {
  SpaceOptions o = small_space();
  o.pp = {1};
  o.cp = {1};
  Fixture f("mixtral-8x7b", "dgx-h100", 1, 8, 4096, o);
  f.job.base.set_moe_a2a_overlap(true);
  const PlanSpace space(f.job, o);
  int on = 0, off_allowed = 0;
  for (const Knobs& k : space.settings({2, 1, 4, 1, 4, 1, {}, {}, {}, 0})) {
    if (k.a2a_overlap) {
      ++on;
      EXPECT_NE(k.recompute, pb::RECOMPUTE_FULL);
      EXPECT_NE(k.sharding, pb::SHARDING_FSDP);
      EXPECT_TRUE(space.plan(k).moe_a2a_overlap());
    } else {
      EXPECT_FALSE(space.plan(k).moe_a2a_overlap());
      if (space.a2a_overlap_allowed(k)) ++off_allowed;
    }
  }
  EXPECT_GT(on, 0);
  EXPECT_EQ(on, off_allowed);  // each allowed setting both ways
  for (const Knobs& k : space.settings({2, 1, 4, 1, 1, 1, {}, {}, {}, 0}))
    EXPECT_FALSE(k.a2a_overlap);  // ep 1: no all-to-all
  Fixture dense("llama3-8b", "dgx-h100", 1, 8, 4096, o);
  for (const Knobs& k : dense.space.settings({2, 1, 4, 1, 1, 1, {}, {}, {}, 0}))
    EXPECT_FALSE(k.a2a_overlap);
}

// recompute_every is searched: an exhaustive pass refines the best full-recompute plans to every
// N-th layer (here, with memory to spare, every 32nd: one of Llama 3 8B's 32 layers re-run, the
// least recomputation full allows), and the plan file says it; a knob of 0 writes no field.
TEST(Search, RecomputeEveryIsSearchedFromFullRecompute) {
  SpaceOptions o = small_space();
  o.recompute = {pb::RECOMPUTE_FULL};
  Fixture f("llama3-8b", "dgx-h100", 1, 16, 2048, o);
  SearchOptions so;
  so.force_exhaustive = true;
  so.threads = 2;
  const auto r = search(f.space, f.engine, so);
  ASSERT_FALSE(r.ranked.empty());
  const RankedPlan& best = r.ranked.front();
  EXPECT_EQ(best.knobs.recompute, pb::RECOMPUTE_FULL);
  EXPECT_EQ(best.knobs.recompute_every, 32);
  EXPECT_EQ(best.plan.recompute_every(), 32);
  Knobs every_layer = best.knobs;
  every_layer.recompute_every = 0;
  EXPECT_FALSE(f.space.plan(every_layer).has_recompute_every());
  const Evaluation e = evaluate(f.space, every_layer, f.engine);
  ASSERT_EQ(e.status, Evaluation::Status::kTimed);
  EXPECT_LT(best.eval.result.step_time_s(), e.result.step_time_s());
}

TEST(Search, ExhaustiveEqualsBruteForce) {
  Fixture f("llama3-8b", "dgx-h100", 2, 64, 4096, small_space());
  SearchOptions o;
  o.force_exhaustive = true;
  o.distinct = false;
  o.threads = 2;
  const auto result = search(f.space, f.engine, o);
  ASSERT_FALSE(result.ranked.empty());
  // Brute force, written independently: evaluate every point, keep the best by the same order.
  std::optional<RankedPlan> best;
  for (const auto& k : all_points(f.space)) {
    const Evaluation e = evaluate(f.space, k, f.engine);
    if (e.status != Evaluation::Status::kTimed) continue;
    RankedPlan p{k, f.space.plan(k), e};
    if (!best || better(p, *best)) best = p;
  }
  ASSERT_TRUE(best);
  EXPECT_EQ(knob_key(result.ranked.front().knobs), knob_key(best->knobs));
  EXPECT_EQ(result.ranked.front().eval.step_time_s(), best->eval.step_time_s());
}

TEST(Search, LocalSearchWithinOnePercentOfExhaustive) {
  for (const auto& [model, nodes, gbs] :
       {std::tuple{"llama3-8b", 2, 64}, std::tuple{"llama3-70b", 4, 128}}) {
    SpaceOptions space = small_space();
    space.placements = {"", "tp,cp,pp,dp"};
    Fixture f(model, "dgx-h100", nodes, gbs, 4096, space);
    SearchOptions exhaustive;
    exhaustive.force_exhaustive = true;
    exhaustive.threads = 2;
    SearchOptions pruned;
    pruned.exhaustive_limit = 0;
    pruned.threads = 2;
    const auto a = search(f.space, f.engine, exhaustive);
    const auto b = search(f.space, f.engine, pruned);
    ASSERT_TRUE(a.stats.exhaustive) << model;
    ASSERT_FALSE(a.ranked.empty() || b.ranked.empty()) << model;
    EXPECT_FALSE(b.stats.exhaustive);
    EXPECT_LT(b.stats.timed, a.stats.timed) << model;
    EXPECT_LE(b.ranked.front().eval.step_time_s(), 1.01 * a.ranked.front().eval.step_time_s())
        << model;
  }
}

// The progress count (checks and timings so far) must not go back when a phase times plans
// the previous phase only checked: it once restarted from the plans counted, not the work done.
TEST(Search, ProgressCountNeverDecreasesAcrossPhases) {
  Fixture f("llama3-8b", "dgx-h100", 2, 64, 4096, small_space());
  SearchOptions o;
  o.exhaustive_limit = 0;  // screen, then local search: several phases
  std::vector<Progress> seen;
  o.progress = [&](const Progress& p) { seen.push_back(p); };
  const auto r = search(f.space, f.engine, o);
  ASSERT_FALSE(r.ranked.empty());
  std::set<std::string> phases;
  for (size_t i = 0; i < seen.size(); ++i) {
    phases.insert(seen[i].phase);
    if (i > 0) EXPECT_GE(seen[i].evaluated, seen[i - 1].evaluated) << "at report " << i;
  }
  EXPECT_GE(phases.size(), 2U);
  ASSERT_FALSE(seen.empty());
  EXPECT_GE(seen.back().evaluated, r.stats.checked);
}

TEST(Search, NeverReturnsAPlanThatDoesNotFit) {
  // 70B on 32 H100: a full replica's weights, gradients and Adam state take ~1.1 TB, so most
  // plans do not fit; the sharded, model-parallel ones do.
  Fixture f("llama3-70b", "dgx-h100", 4, 64, 4096, small_space());
  SearchOptions o;
  o.top_k = 1000;
  o.distinct = false;
  o.threads = 2;
  const auto r = search(f.space, f.engine, o);
  EXPECT_GT(r.stats.out_of_memory, 0);
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& p : r.ranked) {
    for (const auto& m : p.eval.result.memory()) {
      EXPECT_LE(m.peak_bytes(), m.capacity_bytes()) << plan_label(p);
      EXPECT_FALSE(m.oom());
    }
  }
  EXPECT_FALSE(r.closest_oom_plan.empty());
  EXPECT_GT(r.closest_oom_peak_bytes, r.closest_oom_capacity_bytes);
}

TEST(Search, NothingFitsGivesAnEmptyRanking) {
  // 405B on one node: even fully sharded weights and optimizer state (~6.5 TB) exceed 8 x 80 GB.
  Fixture f("llama3-405b", "dgx-h100", 1, 8, 4096, small_space());
  const auto r = search(f.space, f.engine, SearchOptions{});
  EXPECT_TRUE(r.ranked.empty());
  EXPECT_GT(r.stats.out_of_memory, 0);
}

TEST(Search, DeterministicAcrossThreadCounts) {
  SpaceOptions space;
  space.max_micro_batch = 4;
  Fixture f("llama3-70b", "dgx-h100", 8, 256, 4096, space);
  SearchOptions one;
  one.exhaustive_limit = 0;
  one.top_k = 10;
  SearchOptions two = one;
  two.threads = 2;
  const auto a = search(f.space, f.engine, one);
  const auto b = search(f.space, f.engine, two);
  ASSERT_FALSE(a.ranked.empty());
  EXPECT_EQ(ranking_bytes(a), ranking_bytes(b));
  EXPECT_EQ(a.stats.checked, b.stats.checked);
  EXPECT_EQ(a.stats.timed, b.stats.timed);
}

TEST(Search, PlanFileResimulatesToTheSameStepTime) {
  Fixture f("llama3-70b", "dgx-h100", 8, 256, 4096);
  SearchOptions o;
  o.threads = 2;
  const auto r = search(f.space, f.engine, o);
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& p : r.ranked) {
    // What `orrery plan --out` writes and `orrery simulate --plan` reads.
    pb::Plan back;
    parse_spec(to_yaml(p.plan), "best-plan.yaml", SpecFormat::kYaml, &back);
    const auto model = models::load_model(back.model());
    const auto cluster = topologies::load_cluster(back.cluster(), back.nodes());
    const topologies::Topology topology(cluster);
    const sim::CostModels costs(topology, "bf16");
    const auto again = sim::simulate_analytic(plan::resolve_plan(back, model, cluster), costs);
    EXPECT_EQ(again.result.step_time_s(), p.eval.step_time_s()) << plan_label(p);
  }
}

TEST(Explain, NamesTheLimitingTerm) {
  Fixture f("llama3-70b", "dgx-h100", 8, 256, 4096);
  SearchOptions o;
  o.threads = 2;
  const auto r = search(f.space, f.engine, o);
  ASSERT_GE(r.ranked.size(), 2u);
  for (const auto& p : r.ranked) {
    // The largest overhead, found by hand from the breakdown.
    const auto& b = p.eval.result.breakdown();
    std::string name = "recompute";
    double most = b.recompute_s();
    auto consider = [&](const std::string& n, double s) {
      if (s > most) most = s, name = n;
    };
    for (const auto& c : b.exposed_comm()) consider("exposed " + c.name(), c.seconds());
    consider("bubble", b.pipeline_bubble_s());
    consider("optimizer", b.optimizer_s());
    EXPECT_EQ(limiting_term(p.eval.result).name, name);
    EXPECT_NE(what_limits(p, r.ranked.front()).find(name), std::string::npos);
  }
  const std::string why = why_best(r.ranked[0], &r.ranked[1]);
  EXPECT_NE(why.find("beats #2 by"), std::string::npos) << why;
}

TEST(Search, HeterogeneousStagesGetLayersBySpeed) {
  // The mixed preset: 16 DGX A100 + 16 DGX H100 nodes (256 GPUs).
  SpaceOptions space;
  space.max_micro_batch = 2;
  space.placements = {""};
  space.bucket_bytes = {0};
  Fixture f("llama3-70b", "mixed-a100-h100", 32, 512, 4096, space);
  SearchOptions o;
  o.threads = 2;
  const auto r = search(f.space, f.engine, o);
  ASSERT_FALSE(r.ranked.empty());
  const auto& best = r.ranked.front();
  ASSERT_EQ(static_cast<int64_t>(best.knobs.stage_groups.size()), best.knobs.pp);
  // Each H100 stage holds at least as many layers as each A100 stage.
  int64_t most_a100 = 0, least_h100 = 1 << 30;
  for (int i = 0; i < best.plan.layers_per_stage_size(); ++i) {
    const int64_t n = best.plan.layers_per_stage(i);
    if (best.knobs.stage_groups[static_cast<size_t>(i)] == "a100")
      most_a100 = std::max(most_a100, n);
    else
      least_h100 = std::min(least_h100, n);
  }
  EXPECT_GT(least_h100, most_a100) << plan_label(best);
}

// Prune with analytic, rank the best K with des: the final order follows des step times.
TEST(Rerank, BestPlansAreRankedWithTheDiscreteEventEngine) {
  Fixture f("llama3-8b", "dgx-h100", 2, 64, 4096, small_space());
  const DesEngine des(f.costs);
  SearchOptions o;
  o.threads = 2;
  o.top_k = 3;
  o.rerank = &des;
  o.rerank_k = 3;
  const SearchResult r = search(f.space, f.engine, o);
  ASSERT_EQ(r.ranked.size(), 3u);
  EXPECT_TRUE(r.rerank_skipped.empty()) << r.rerank_skipped;
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    EXPECT_EQ(r.ranked[i].eval.result.engine(), "des");
    EXPECT_EQ(r.ranked[i].eval.result.wall_time_s(), 0);  // results stay deterministic
    if (i > 0) {
      EXPECT_LE(r.ranked[i - 1].eval.result.step_time_s(), r.ranked[i].eval.result.step_time_s());
    }
  }
}

// A des budget smaller than the best plans' work: the analytic ranking stands, unchanged, and
// says why; decided from the plans alone, before any des run.
TEST(Rerank, AnExhaustedBudgetKeepsTheAnalyticRanking) {
  Fixture f("llama3-8b", "dgx-h100", 2, 64, 4096, small_space());
  SearchOptions o;
  o.threads = 1;
  o.top_k = 3;
  const SearchResult analytic = search(f.space, f.engine, o);
  const DesEngine des(f.costs);
  o.rerank = &des;
  o.rerank_k = 3;
  o.rerank_budget = 100;
  const SearchResult r = search(f.space, f.engine, o);
  // Each plan: cp x micro-batches x 32 layers; the three best here need 64 or more each.
  EXPECT_EQ(r.rerank_skipped.rfind("the best 3 plans need ", 0), 0u) << r.rerank_skipped;
  EXPECT_NE(r.rerank_skipped.find("units of des work, over the budget of 100"), std::string::npos);
  EXPECT_EQ(ranking_bytes(r), ranking_bytes(analytic));
}

// des work as it was counted before cp rings were folded: one rank per (cp, pp) index through
// every micro-batch of its layers.
double unfolded_work(const plan::ResolvedPlan& plan) {
  return static_cast<double>(plan.degrees.cp * plan.num_micro_batches * plan.model.num_layers());
}

// A cp-heavy job (tp8 cp4 on 4 nodes: each ring hop crosses the fabric, so the ring is uniform
// and des folds it onto cp = 0) whose best plans' des work, counted unfolded, exceeds the
// budget: counted as the engine now runs them they fit, and the plans are ranked with des.
TEST(Rerank, FoldedCpRingsFitABudgetTheUnfoldedCountExceeded) {
  SpaceOptions so = small_space();
  so.tp = {8};
  so.cp = {4};
  so.pp = {1};
  Fixture f("llama3-8b", "dgx-h100", 4, 16, 8192, so);
  const DesEngine des(f.costs);
  SearchOptions o;
  o.threads = 1;
  o.top_k = 3;
  const SearchResult analytic = search(f.space, f.engine, o);
  ASSERT_FALSE(analytic.ranked.empty());
  double unfolded = 0, folded = 0;
  for (const auto& p : analytic.ranked) {
    const plan::ResolvedPlan plan = plan::resolve_plan(p.plan, f.job.model, f.job.cluster);
    ASSERT_EQ(plan.degrees.cp, 4);
    unfolded += unfolded_work(plan);
    folded += des.work(plan);
  }
  // Folded: micro-batches x 32 layers x ring weight 1 + (4 - 1) / 5 = 1.6, against 4 x
  // micro-batches x 32 layers unfolded.
  EXPECT_NEAR(folded, unfolded * 1.6 / 4, 1e-9 * unfolded);
  o.rerank = &des;
  o.rerank_k = 3;
  o.rerank_budget = (folded + unfolded) / 2;
  const SearchResult r = search(f.space, f.engine, o);
  EXPECT_TRUE(r.rerank_skipped.empty()) << r.rerank_skipped;
  for (const auto& p : r.ranked) EXPECT_EQ(p.eval.result.engine(), "des");
}

// At scale: llama3-405b at seq 32k on 128 DGX H100 nodes, tp8 cp4 pp16 dp2 (1,024 GPUs), 32
// micro-batches. Unfolded, five such plans needed 5 x 4 x 32 x 126 = 80,640 units, over the
// default budget of 60,000 (cmd_plan.cpp), so `orrery plan` skipped the des ranking; folded
// they need 5 x 32 x 126 x 1.6 = 32,256.
TEST(Rerank, FiveCpHeavyPlansAt1024GpusFitTheDefaultBudget) {
  Fixture f("llama3-405b", "dgx-h100", 128, 64, 32768);
  pb::Plan p = f.job.base;
  auto* q = p.mutable_parallel();
  q->set_tp(8), q->set_cp(4), q->set_pp(16), q->set_dp(2), q->set_sequence_parallel(true);
  p.set_micro_batch_size(1);
  for (int s = 0; s < 16; ++s) p.add_layers_per_stage(s == 0 || s == 15 ? 7 : 8);
  const plan::ResolvedPlan plan = plan::resolve_plan(p, f.job.model, f.job.cluster);
  const DesEngine des(f.costs);
  constexpr double kDefaultBudget = 60000;
  EXPECT_GT(5 * unfolded_work(plan), kDefaultBudget);
  EXPECT_DOUBLE_EQ(des.work(plan), 32 * 126 * 1.6);
  EXPECT_LT(5 * des.work(plan), kDefaultBudget);
}

}  // namespace
}  // namespace orrery::planner
