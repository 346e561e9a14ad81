// Stragglers in the des engine (ClusterSpec.stragglers, docs/simulator.md#stragglers): a slow
// GPU's compute takes longer and its peers wait for it at the next synchronous collective or
// transfer; a degraded NIC link carries less. A straggler breaks the symmetry the engine folds
// ranks by, so the default run must equal --all-ranks. The analytic engine refuses them.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/topologies/stragglers.hpp"

namespace orrery::sim {
namespace {

struct Step {
  pb::SimResult result;
  int64_t simulated_ranks = 0;
};

Step des_step(const plan::ResolvedPlan& plan, bool all_ranks = false) {
  const topologies::Topology topology(plan.cluster);
  const CostModels costs(topology, plan.precision.dtype);
  DesOptions o;
  o.all_ranks = all_ranks;
  o.timeline = false;
  return {simulate_des(plan, costs, o).result, des_simulated_ranks(plan, costs, o)};
}

plan::ResolvedPlan with_stragglers(const plan::ResolvedPlan& plan,
                                   std::initializer_list<const char*> flags) {
  pb::ClusterSpec cluster = plan.cluster;
  for (const char* f : flags) topologies::add_straggler(cluster, f, "--straggler");
  return plan::resolve_plan(plan.plan, plan.model, cluster);
}

TEST(DesStragglers, SlowGpuInDataParallelPacesTheStepByItsComputeOnly) {
  // dp 8, nothing overlapped: each replica computes C (forward and backward), then the gradient
  // all-reduce A runs once every member arrives, then the optimizer O. GPU 3 at 1.5x computes
  // 1.5 C, the other seven wait for it at the all-reduce, which runs at its own pace, and its
  // optimizer takes 1.5 O: step = 1.5 (C + O) + A, i.e. base + 0.5 (C + O), between the base and
  // 1.5x the base (the whole-step multiplier of the closed form overstates it).
  const plan::ResolvedPlan plan = test::dgx_h100_plan(1, 8);
  const Step base = des_step(plan);
  const Step slow = des_step(with_stragglers(plan, {"gpu=3:1.5"}));
  const double c = base.result.breakdown().compute_s() + base.result.breakdown().optimizer_s();
  EXPECT_GT(slow.result.step_time_s(), base.result.step_time_s() * 1.01);
  EXPECT_LT(slow.result.step_time_s(), base.result.step_time_s() * 1.5);
  EXPECT_NEAR(slow.result.step_time_s(), base.result.step_time_s() + 0.5 * c,
              0.01 * base.result.step_time_s());
}

TEST(DesStragglers, SlowGpuInTensorParallelSlowsEveryLayer) {
  // tp 8: every layer's all-reduces wait for GPU 2, so each stretch of compute between them runs
  // at its pace: again base + 0.5 (C + O), all of the step's compute and optimizer.
  const plan::ResolvedPlan plan = test::dgx_h100_plan(8, 1);
  const Step base = des_step(plan);
  const Step slow = des_step(with_stragglers(plan, {"gpu=2:1.5"}));
  const double c = base.result.breakdown().compute_s() + base.result.breakdown().optimizer_s();
  EXPECT_NEAR(slow.result.step_time_s(), base.result.step_time_s() + 0.5 * c,
              0.01 * base.result.step_time_s());
}

TEST(DesStragglers, FoldedRunEqualsAllRanksWithAStraggler) {
  // Without stragglers the default run simulates one representative (tp = dp = 0); with one it
  // must simulate every rank and agree with --all-ranks exactly. The straggler is GPU 5, a rank
  // the folded run would not have simulated.
  const plan::ResolvedPlan plan = test::dgx_h100_plan(2, 4);
  EXPECT_EQ(des_step(plan).simulated_ranks, 1);
  const plan::ResolvedPlan slowed = with_stragglers(plan, {"gpu=5:1.3"});
  const Step folded = des_step(slowed), all = des_step(slowed, true);
  EXPECT_EQ(folded.simulated_ranks, 8);
  EXPECT_DOUBLE_EQ(folded.result.step_time_s(), all.result.step_time_s());
  EXPECT_GT(folded.result.step_time_s(), des_step(plan).result.step_time_s());
}

plan::ResolvedPlan pipeline_plan() {
  // tp 8 inside each of 2 nodes, pp 2 across them: every stage-to-stage transfer leaves GPU i of
  // node 0 by NIC i (a GPU uses its own NIC) for GPU i of node 1.
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(8);
  p.mutable_parallel()->set_pp(2);
  p.mutable_parallel()->set_dp(1);
  p.set_micro_batch_size(1);
  return plan::resolve_plan(p, models::load_model("llama3-8b"),
                            topologies::load_cluster("dgx-h100", 2));
}

TEST(DesStragglers, DegradedNicSlowsThePipelineTransfersOverIt) {
  // NIC 0 of node 0 at 2% of its bandwidth: 1 GB/s instead of 50 GB/s, both directions. A
  // micro-batch's activation (1 x 2048 x 4096 x 2 bytes = 16.8 MB) or its gradient then takes
  // 16.8 ms to cross instead of about 0.4 ms, and 1F1B puts at least one crossing of each of the
  // 8 micro-batches on the step's path: at least 8 x 16 ms more (measured: 0.216 s -> 0.360 s).
  const plan::ResolvedPlan plan = pipeline_plan();
  const double base = des_step(plan).result.step_time_s();
  const Step slow = des_step(with_stragglers(plan, {"nic=0.0:0.02"}));
  EXPECT_EQ(slow.simulated_ranks, 16);
  EXPECT_GT(slow.result.step_time_s(), base + 8 * 0.016);
  const Step all = des_step(with_stragglers(plan, {"nic=0.0:0.02"}), true);
  EXPECT_DOUBLE_EQ(slow.result.step_time_s(), all.result.step_time_s());
}

TEST(DesStragglers, AnalyticEngineRefusesThem) {
  const plan::ResolvedPlan plan = with_stragglers(test::dgx_h100_plan(1, 8), {"gpu=0:1.2"});
  const topologies::Topology topology(plan.cluster);
  const CostModels costs(topology, plan.precision.dtype);
  try {
    simulate_analytic(plan, costs);
    ADD_FAILURE() << "the analytic engine priced a straggler";
  } catch (const base::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "cluster.stragglers: the analytic engine does not simulate stragglers (1 "
                  "listed); use the des engine (--engine des)"),
              std::string::npos)
        << e.what();
  }
}

std::string flag_error(const std::string& text) {
  pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 1);
  try {
    topologies::add_straggler(cluster, text, "--straggler");
    topologies::validate_cluster(cluster, SourceMap());
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(DesStragglers, FlagTextAndRangesAreChecked) {
  EXPECT_EQ(flag_error("gpu=7:1.5"), "");
  EXPECT_EQ(flag_error("nic=0.7:0.5"), "");
  EXPECT_NE(flag_error("gpu=8:1.5").find("stragglers[0].gpu: got 8, but the cluster has 8 GPUs"),
            std::string::npos)
      << flag_error("gpu=8:1.5");
  EXPECT_NE(flag_error("nic=1.0:0.5").find("stragglers[0].node: got 1, but the cluster has 1"),
            std::string::npos)
      << flag_error("nic=1.0:0.5");
  EXPECT_NE(
      flag_error("gpu=1:0").find("--straggler: got 'gpu=1:0': the factor must be a number > 0"),
      std::string::npos)
      << flag_error("gpu=1:0");
  EXPECT_NE(flag_error("gpu=1:inf").find("the factor must be a number > 0"), std::string::npos);
  EXPECT_NE(flag_error("link=1:0.5").find("expected gpu=N:F"), std::string::npos);
  EXPECT_NE(flag_error("gpu=x:1.5").find("'x' is not an index"), std::string::npos);
}

}  // namespace
}  // namespace orrery::sim
