// MoE token dropping at an expert capacity (moe_capacity_factor, moe_pad_to_capacity) and the
// routed experts run as one grouped GEMM or one GEMM per local expert (moe_expert_gemm)
// (docs/simulator.md, "MoE capacity and expert GEMMs"): each expectation derived by hand next to
// it, and the analytic and des engines agreeing within 2% on one node.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/compute_defaults.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

// Mixtral 8x7B cut to 2 layers (8 experts of FFN 14,336, top-2, hidden 4,096) on one DGX H100:
// tp 2 with SP, dp 4, folded ep 4 at etp 1 (each rank routes its own 2,048 tokens and holds 2
// whole experts), one sequence of 4,096 tokens per micro-batch, 2 micro-batches.
pb::ModelSpec small_mixtral() {
  pb::ModelSpec m = models::preset("mixtral-8x7b");
  m.set_num_layers(2);
  return m;
}

pb::Plan mixtral_plan() {
  pb::Plan p;
  p.set_model("mixtral-8x7b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(4096);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_dp(4);
  p.mutable_parallel()->set_ep(4);
  p.mutable_parallel()->set_etp(1);
  p.mutable_parallel()->set_sequence_parallel(true);
  p.set_micro_batch_size(1);
  return p;
}

plan::ResolvedPlan resolve(const pb::Plan& p) {
  return plan::resolve_plan(p, small_mixtral(), topologies::load_cluster("dgx-h100", 1));
}

const models::LayerOp& op(const std::vector<models::LayerOp>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return o;
  ADD_FAILURE() << "no op " << name;
  return ops.front();
}

// 2,048 tokens x top-2 = 4,096 pairs on a rank on average; the dispatch sends 2,048 x 2 copies
// x 4,096 x 2 B, 3/4 of them to the other EP ranks.
constexpr double kMeanPairs = 2048.0 * 2;
constexpr double kMeanSent = 2048.0 * 2 * 4096 * 2 * 3 / 4;
// up + gate of one pair: 2 x (2 x 14,336) x 4,096 FLOPs.
constexpr double kUpFlopsPerPair = 2.0 * 2 * 14336 * 4096;

struct MoeFigures {
  double pairs, up_flops, sent;
};

MoeFigures figures(double imbalance, double capacity, bool pad) {
  pb::Plan p = mixtral_plan();
  if (imbalance > 0) p.set_moe_imbalance(imbalance);
  if (capacity > 0) p.set_moe_capacity_factor(capacity);
  p.set_moe_pad_to_capacity(pad);
  const auto ops = plan::detail::make_op_tables(resolve(p)).moe_layer;
  return {static_cast<double>(op(ops, "moe.experts.up").shape[0]),
          op(ops, "moe.experts.up").forward_flops, op(ops, "moe.router").ep_alltoall_bytes};
}

// Without a capacity the busiest rank runs imbalance x the mean (1.5: 6,144 pairs). A capacity
// of 1.25 caps it at 5,120 and leaves the all-to-all alone (nothing is dropped on average); a
// capacity of 0.5 drops half of every expert's pairs: 2,048 pairs and half the bytes. Padded,
// every expert runs and receives exactly its capacity, whatever the imbalance.
TEST(MoeCapacity, ExpertsAndAllToAllPricedAtTheCapacity) {
  const auto none = figures(1.5, 0, false);
  EXPECT_DOUBLE_EQ(none.pairs, 1.5 * kMeanPairs);
  EXPECT_DOUBLE_EQ(none.sent, kMeanSent);
  const auto capped = figures(1.5, 1.25, false);
  EXPECT_DOUBLE_EQ(capped.pairs, 1.25 * kMeanPairs);
  EXPECT_DOUBLE_EQ(capped.up_flops, 1.25 * kMeanPairs * kUpFlopsPerPair);
  EXPECT_DOUBLE_EQ(capped.sent, kMeanSent);
  const auto below = figures(1.5, 0.5, false);
  EXPECT_DOUBLE_EQ(below.pairs, 0.5 * kMeanPairs);
  EXPECT_DOUBLE_EQ(below.sent, 0.5 * kMeanSent);
  // The cap above the busiest: no effect (4,505.6 pairs; the op's shape rounds them to 4,506).
  const auto loose = figures(1.1, 1.25, false);
  EXPECT_DOUBLE_EQ(loose.pairs, 4506);
  EXPECT_NEAR(loose.up_flops, 1.1 * kMeanPairs * kUpFlopsPerPair, 1e-12 * loose.up_flops);
  const auto padded = figures(1.1, 1.25, true);
  EXPECT_DOUBLE_EQ(padded.pairs, 1.25 * kMeanPairs);
  EXPECT_DOUBLE_EQ(padded.sent, 1.25 * kMeanSent);
}

double step(const plan::ResolvedPlan& plan, EngineKind engine) {
  const topologies::Topology topology(plan.cluster);
  const CostModels costs(topology, "bf16");
  return simulate(plan, costs, engine).result.step_time_s();
}

// One node, nothing contends: the engines agree on the capped and padded plans, and capping the
// busiest rank's experts from 1.5 to 1.25 x the mean shortens the step in both.
TEST(MoeCapacity, EnginesAgreeOnOneNode) {
  pb::Plan free = mixtral_plan();
  free.set_moe_imbalance(1.5);
  pb::Plan capped = free;
  capped.set_moe_capacity_factor(1.25);
  pb::Plan padded = capped;
  padded.set_moe_pad_to_capacity(true);
  for (EngineKind e : {EngineKind::kAnalytic, EngineKind::kDes})
    EXPECT_LT(step(resolve(capped), e), step(resolve(free), e)) << to_string(e);
  for (const auto& p : {capped, padded}) {
    const auto plan = resolve(p);
    const double a = step(plan, EngineKind::kAnalytic);
    EXPECT_NEAR(step(plan, EngineKind::kDes), a, 0.02 * a);
  }
}

// Per expert: each routed-expert op of the layer program becomes 2 steps (2 local experts), each
// with half the op's work and its own node name.
TEST(MoeExpertGemm, PerExpertSplitsTheExpertKernels) {
  pb::Plan p = mixtral_plan();
  p.set_moe_expert_gemm(pb::MOE_EXPERT_GEMM_PER_EXPERT);
  const auto plan = resolve(p);
  const auto ops = plan::detail::make_op_tables(plan).moe_layer;
  std::vector<std::string> names;
  for (const auto& s : plan::detail::layer_program(ops, plan, pb::PHASE_FORWARD)) {
    if (s.kind != plan::detail::Step::Kind::kCompute || s.op->name.rfind("moe.experts.", 0) != 0)
      continue;
    names.push_back(s.op->name + s.name);
    EXPECT_DOUBLE_EQ(s.work_fraction, 0.5);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"moe.experts.up.expert0", "moe.experts.up.expert1",
                                      "moe.experts.act.expert0", "moe.experts.act.expert1",
                                      "moe.experts.down.expert0", "moe.experts.down.expert1"}));
}

// The default GEMM curve is eff(F) = m F / (F + h), so a compute-bound GEMM of F FLOPs takes
// o + (F + h) / (P m) and two GEMMs of F / 2 take 2 o + (F + 2 h) / (P m): one more launch
// overhead and one more h / (P m). The up projection of 4,096 pairs is compute-bound on an H100.
TEST(MoeExpertGemm, EachExpertPaysOverheadAndEfficiency) {
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  const topologies::Topology topology(cluster);
  const CostModels costs(topology, "bf16");
  const auto& device = topologies::find_device(cluster, cluster.node_types(0).device());
  const auto curve = detail::default_curve(device, pb::OP_CLASS_GEMM);
  const double peak = topologies::peak_flops(device, "bf16");
  const double f = kMeanPairs * kUpFlopsPerPair, bytes = 1e6;
  const auto t = [&](double flops) {
    return costs.compute().seconds(device, pb::OP_CLASS_GEMM, flops, bytes / (f / flops), {},
                                   pb::PHASE_FORWARD, "moe.experts.up", "");
  };
  const double extra =
      curve.overhead_s() + curve.half_saturation_flops() / (peak * curve.max_efficiency());
  EXPECT_NEAR(2 * t(f / 2) - t(f), extra, 1e-9 * t(f));
  EXPECT_GT(extra, 0);
}

// Whole steps: per-expert GEMMs are slower than grouped ones in both engines, which agree.
TEST(MoeExpertGemm, EnginesAgreeOnOneNode) {
  pb::Plan grouped = mixtral_plan();
  pb::Plan per_expert = grouped;
  per_expert.set_moe_expert_gemm(pb::MOE_EXPERT_GEMM_PER_EXPERT);
  for (EngineKind e : {EngineKind::kAnalytic, EngineKind::kDes})
    EXPECT_GT(step(resolve(per_expert), e), step(resolve(grouped), e)) << to_string(e);
  const auto plan = resolve(per_expert);
  const double a = step(plan, EngineKind::kAnalytic);
  EXPECT_NEAR(step(plan, EngineKind::kDes), a, 0.02 * a);
}

}  // namespace
}  // namespace orrery::sim
