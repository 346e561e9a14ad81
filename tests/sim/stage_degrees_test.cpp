// Pipeline stages with their own tensor- and data-parallel degrees (Plan.stage_tp / stage_dp) on
// heterogeneous clusters: resolution and rank placement, the redistribution between stages of
// different shapes, memory and analytic time per stage against the uniform plan of that stage's
// shape, and the lowered graph's pipeline traffic. (The rules' rejections are in the bad-plan
// corpus, tests/inputs/sim/bad_plans/stage-*.yaml; des against analytic in
// des_stage_degrees_test.cpp.)
//
// The running example: llama3-8b (32 layers, seq 2048) on tests/inputs/sim/mixed-1a100-1h100.yaml
// (one DGX A100: devices 0-7, one DGX H100: devices 8-15), pp 2, parallel.dp 2, micro-batch 1: a
// pipeline micro-batch is 1 x 2 = 2 sequences; stage 0 (A100) runs tp 4 x dp 2 (one sequence per
// replica), stage 1 (H100) tp 8 x dp 1 (both sequences); global batch 8 -> 4 micro-batches.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/stage_redistribution.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "stage_degrees_plans.hpp"

namespace orrery::sim {
namespace {

const std::string& kCluster = test::kMixedCluster;

pb::Plan staged(bool sp = false) { return test::staged_plan(sp); }

// The same job as one uniform plan (every stage tp x dp, micro-batch mbs).
pb::Plan uniform(int64_t tp, int64_t dp, int64_t mbs) {
  pb::Plan p = staged();
  p.clear_stage_tp();
  p.clear_stage_dp();
  p.mutable_parallel()->set_tp(tp);
  p.mutable_parallel()->set_dp(dp);
  p.set_micro_batch_size(mbs);
  return p;
}

plan::ResolvedPlan resolve(const pb::Plan& p) {
  return plan::resolve_plan(p, models::load_model(p.model()), topologies::load_cluster(kCluster));
}

TEST(StageDegrees, ResolveGivesEachStageItsDegreesAndDevices) {
  const plan::ResolvedPlan r = resolve(staged());
  ASSERT_FALSE(r.uniform_stages());
  EXPECT_EQ(r.world_size(), 16);  // 4 x 2 + 8 x 1
  EXPECT_EQ(r.stage(0).tp, 4);
  EXPECT_EQ(r.stage(0).dp, 2);
  EXPECT_EQ(r.stage(1).tp, 8);
  EXPECT_EQ(r.stage(1).dp, 1);
  // A pipeline micro-batch of 2 sequences: 1 per stage-0 replica, 2 for stage 1's one replica.
  EXPECT_EQ(r.for_stage(0).micro_batch_size, 1);
  EXPECT_EQ(r.for_stage(1).micro_batch_size, 2);
  EXPECT_EQ(r.num_micro_batches, 4);
  EXPECT_FALSE(r.plan.parallel().has_tp());  // stage_tp is the one source
  // Consecutive ranks per stage, devices in order: stage 0 on the A100s, stage 1 on the H100s.
  EXPECT_EQ(plan::device_of(r, 7).name(), "A100-SXM-80GB");
  EXPECT_EQ(plan::device_of(r, 8).name(), "H100-SXM");

  // stage_node_groups puts stage 0 on the H100 node and stage 1 on the A100 node.
  pb::Plan swapped = staged();
  swapped.add_stage_node_groups("h100");
  swapped.add_stage_node_groups("a100");
  const plan::ResolvedPlan s = resolve(swapped);
  EXPECT_EQ(s.device_of_rank[0], 8);
  EXPECT_EQ(s.device_of_rank[8], 0);
  EXPECT_EQ(plan::device_of(s, 0).name(), "H100-SXM");
}

TEST(StageDegrees, ListsRepeatingTheUniformDegreesAreTheUniformPlan) {
  pb::Plan p = staged();
  p.clear_stage_tp();
  p.clear_stage_dp();
  for (int64_t v : {8, 8}) p.add_stage_tp(v);
  p.mutable_parallel()->set_dp(1);
  p.set_micro_batch_size(2);
  const plan::ResolvedPlan r = resolve(p);
  EXPECT_TRUE(r.uniform_stages());
  EXPECT_EQ(r.degrees.tp, 8);
  EXPECT_EQ(r.plan.stage_tp_size(), 0);
  const plan::ResolvedPlan u = resolve(uniform(8, 1, 2));
  topologies::Topology topo(u.cluster);
  CostModels costs(topo, "bf16");
  EXPECT_EQ(simulate_analytic(r, costs).result.SerializeAsString(),
            simulate_analytic(u, costs).result.SerializeAsString());
}

TEST(StageDegrees, RankLayoutNumbersEachStageAsItsOwnGrid) {
  const plan::ResolvedPlan r = resolve(staged());
  const plan::RankLayout layout = plan::rank_layout(r);
  EXPECT_EQ(layout.world_size(), 16);
  // Stage 0: tp innermost, ranks 0-7 = (tp 0..3) x (dp 0..1); stage 1: ranks 8-15, tp 0..7.
  EXPECT_EQ(layout.coord(5).tp, 1);
  EXPECT_EQ(layout.coord(5).dp, 1);
  EXPECT_EQ(layout.coord(5).pp, 0);
  EXPECT_EQ(layout.coord(13).tp, 5);
  EXPECT_EQ(layout.coord(13).pp, 1);
  for (int64_t rank = 0; rank < 16; ++rank) EXPECT_EQ(layout.rank(layout.coord(rank)), rank);
  EXPECT_EQ(layout.group(plan::GroupKind::kTp, 5), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(layout.group(plan::GroupKind::kDp, 5), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(layout.group(plan::GroupKind::kTp, 9),
            (std::vector<int64_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(layout.group(plan::GroupKind::kDp, 9), (std::vector<int64_t>{9}));
  // tp groups {0-3}, {4-7}, {8-15}; dp groups {0,4} .. {3,7}; no pp groups between unlike stages.
  int tp = 0, dp = 0, pp = 0;
  for (const auto& g : layout.process_groups()) {
    tp += g.dim() == "tp", dp += g.dim() == "dp", pp += g.dim() == "pp";
  }
  EXPECT_EQ(tp, 3);
  EXPECT_EQ(dp, 4);
  EXPECT_EQ(pp, 0);
}

// S = one sequence's hidden states: 2048 tokens x 4096 x 2 bytes.
constexpr double kSequenceBytes = 2048.0 * 4096 * 2;

TEST(StageDegrees, RedistributionWithoutSequenceParallelismScattersThenGathers) {
  const plan::ResolvedPlan r = resolve(staged());
  const plan::RankLayout layout = plan::rank_layout(r);
  // Forward 0 -> 1: stage 1's one replica needs both sequences, one from each stage-0 replica;
  // its TP rank k takes the k-th eighth from sender TP rank k % 4: 2 replicas x 8 ranks.
  const auto fwd = plan::redistribute(r, layout, 0, 1);
  ASSERT_EQ(fwd.transfers.size(), 16u);
  double total = 0;
  for (const auto& t : fwd.transfers) {
    total += t.bytes;
    EXPECT_DOUBLE_EQ(t.bytes, kSequenceBytes / 8);
  }
  EXPECT_DOUBLE_EQ(total, 2 * kSequenceBytes);
  const auto into13 = fwd.receives_of(13);  // tp 5: from tp 1 of replica 0 (rank 1) and 1 (rank 5)
  ASSERT_EQ(into13.size(), 2u);
  EXPECT_EQ(into13[0].from, 1);
  EXPECT_EQ(into13[1].from, 5);
  EXPECT_DOUBLE_EQ(fwd.gather_bytes,
                   2 * kSequenceBytes);  // the all-gather's output: both sequences
  // Backward 1 -> 0: each stage-0 replica's sequence from the one stage-1 replica, quarter k
  // from sender TP rank k.
  const auto bwd = plan::redistribute(r, layout, 1, 0);
  ASSERT_EQ(bwd.transfers.size(), 8u);
  const auto into6 = bwd.receives_of(6);  // replica 1, tp 2
  ASSERT_EQ(into6.size(), 1u);
  EXPECT_EQ(into6[0].from, 10);
  EXPECT_DOUBLE_EQ(into6[0].bytes, kSequenceBytes / 4);
  EXPECT_DOUBLE_EQ(bwd.gather_bytes, kSequenceBytes);
}

TEST(StageDegrees, RedistributionWithSequenceParallelismMovesTokenRanges) {
  const plan::ResolvedPlan r = resolve(staged(true));
  const plan::RankLayout layout = plan::rank_layout(r);
  // Receiver tp k of 8 needs tokens [k/8, (k+1)/8), inside sender tp k/2's quarter: one transfer
  // of S/8 per (sender replica, receiver rank), and no all-gather.
  const auto fwd = plan::redistribute(r, layout, 0, 1);
  ASSERT_EQ(fwd.transfers.size(), 16u);
  const auto into13 = fwd.receives_of(13);
  ASSERT_EQ(into13.size(), 2u);
  EXPECT_EQ(into13[0].from, 2);  // replica 0, tp 5 / 2 = 2
  EXPECT_EQ(into13[1].from, 6);
  EXPECT_DOUBLE_EQ(into13[0].bytes, kSequenceBytes / 8);
  EXPECT_EQ(fwd.gather_bytes, 0);
  // Backward: receiver tp k of 4 needs a quarter, held by sender tp 2k and 2k + 1.
  const auto bwd = plan::redistribute(r, layout, 1, 0);
  ASSERT_EQ(bwd.transfers.size(), 16u);
  const auto into6 = bwd.receives_of(6);
  ASSERT_EQ(into6.size(), 2u);
  EXPECT_EQ(into6[0].from, 12);
  EXPECT_EQ(into6[1].from, 13);
}

// Each stage's memory is that of the same stage in the uniform plan of its shape: stage 0 as in
// tp 4 dp 2 (micro-batch 1), stage 1 as in tp 8 dp 1 (micro-batch 2), same layers and devices.
TEST(StageDegrees, MemoryPerStageUsesThatStagesDegreesAndMicroBatch) {
  for (auto sharding : {pb::SHARDING_NONE, pb::SHARDING_ZERO1}) {
    pb::Plan p = staged(true);
    p.set_sharding(sharding);
    pb::Plan a = uniform(4, 2, 1), b = uniform(8, 1, 2);
    for (pb::Plan* q : {&a, &b})
      q->mutable_parallel()->set_sequence_parallel(true), q->set_sharding(sharding);
    const auto mine = memory_per_stage(resolve(p));
    const auto first = memory_per_stage(resolve(a));
    const auto second = memory_per_stage(resolve(b));
    ASSERT_EQ(mine.size(), 2u);
    EXPECT_EQ(mine[0].SerializeAsString(), first[0].SerializeAsString());
    EXPECT_EQ(mine[1].SerializeAsString(), second[1].SerializeAsString());
    // And they differ: tp 4 holds twice tp 8's parameter shard.
    EXPECT_NEAR(mine[0].parameters_bytes() / mine[1].parameters_bytes(), 2.0, 0.05);
  }
}

TEST(StageDegrees, AnalyticCostsEachStageAtItsOwnShape) {
  const plan::ResolvedPlan r = resolve(staged(true));
  topologies::Topology topo(r.cluster);
  CostModels costs(topo, "bf16");
  const pb::SimResult mine = simulate_analytic(r, costs).result;
  const pb::SimResult a = simulate_analytic(resolve([] {
                                              pb::Plan q = uniform(4, 2, 1);
                                              q.mutable_parallel()->set_sequence_parallel(true);
                                              return q;
                                            }()),
                                            costs)
                              .result;
  const pb::SimResult b = simulate_analytic(resolve([] {
                                              pb::Plan q = uniform(8, 1, 2);
                                              q.mutable_parallel()->set_sequence_parallel(true);
                                              return q;
                                            }()),
                                            costs)
                              .result;
  EXPECT_GT(mine.step_time_s(), 0);
  // The slowest stage sets the pipeline: the stage-0 (A100, tp 4) stage is the uniform tp4 plan's
  // critical stage too, so the critical stage's compute is that plan's.
  EXPECT_NEAR(mine.breakdown().compute_s(), a.breakdown().compute_s(),
              1e-9 * a.breakdown().compute_s());
  // Stage 1 processes both sequences on 8 H100s at tp 8: it differs from the tp8 dp1 plan only
  // in its p2p, so the staged step lies between the two uniform plans' bounds set by stage 0.
  EXPECT_NE(mine.step_time_s(), a.step_time_s());
  EXPECT_NE(mine.step_time_s(), b.step_time_s());
  // The breakdown's terms add up to the step.
  const auto& bd = mine.breakdown();
  double sum = bd.compute_s() + bd.pipeline_bubble_s() + bd.optimizer_s();
  for (const auto& c : bd.exposed_comm()) sum += c.seconds();
  EXPECT_NEAR(sum, mine.step_time_s(), 1e-9 * mine.step_time_s());
}

TEST(StageDegrees, LoweredPipelineTrafficPairsUpAcrossUnlikeStages) {
  const plan::ResolvedPlan r = resolve(staged());
  const pb::ExecGraph g = plan::lower(r);
  ASSERT_EQ(g.ranks_size(), 16);
  // Every send has exactly one receive with the same (sender, receiver, tag) and bytes.
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> sends, recvs;
  int gathers = 0;
  for (const auto& rank : g.ranks()) {
    for (const auto& n : rank.nodes()) {
      if (n.kind() == pb::NODE_KIND_SEND) sends[{rank.rank(), n.peer(), n.tag()}] += n.comm_bytes();
      if (n.kind() == pb::NODE_KIND_RECV) recvs[{n.peer(), rank.rank(), n.tag()}] += n.comm_bytes();
      if (n.name().find("recv.act.all_gather") != std::string::npos) ++gathers;
    }
  }
  EXPECT_EQ(sends, recvs);
  // Per micro-batch: 16 activation transfers forward, 8 gradient transfers backward; 4
  // micro-batches.
  EXPECT_EQ(sends.size(), (16u + 8u) * 4u);
  // Stage 1's 8 ranks all-gather the activations once per micro-batch.
  EXPECT_EQ(gathers, 8 * 4);
}

}  // namespace
}  // namespace orrery::sim
