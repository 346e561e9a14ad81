// MoE layouts (docs/simulator.md, "MoE parallel folding and node-limited routing"): expert
// tensor parallelism with EP drawn from tp x cp x dp (parallel.etp), and group-limited routing
// (moe.n_group / topk_group) bounding the nodes a token's dispatch reaches; each expectation
// derived by hand next to it, and the analytic and des engines agreeing on one node.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/moe_routing.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

// Mixtral 8x7B cut to 2 layers (8 experts of FFN 14,336, top-2, hidden 4,096) on one DGX H100:
// tp 2 with sequence parallelism, dp 4, one sequence of 4,096 tokens per micro-batch.
pb::ModelSpec small_mixtral() {
  pb::ModelSpec m = models::preset("mixtral-8x7b");
  m.set_num_layers(2);
  return m;
}

pb::Plan mixtral_plan(int64_t ep, int64_t etp) {
  pb::Plan p;
  p.set_model("mixtral-8x7b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(4096);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_dp(4);
  p.mutable_parallel()->set_ep(ep);
  if (etp > 0) p.mutable_parallel()->set_etp(etp);
  p.mutable_parallel()->set_sequence_parallel(true);
  p.set_micro_batch_size(1);
  return p;
}

plan::ResolvedPlan resolve(const pb::Plan& p, const pb::ModelSpec& m, int64_t nodes = 1) {
  return plan::resolve_plan(p, m, topologies::load_cluster("dgx-h100", nodes));
}

const models::LayerOp& op(const std::vector<models::LayerOp>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return o;
  ADD_FAILURE() << "no op " << name;
  return ops.front();
}

double expert_params(const std::vector<models::LayerOp>& ops) {
  double p = 0;
  for (const auto& o : ops)
    if (plan::is_expert_op(o)) p += o.parameters;
  return p;
}

constexpr double kExpertParams = 3.0 * 4096 * 14336;  // up + gate + down of one expert

TEST(MoeFolding, GroupSizesFollowTheFoldedGrid) {
  const auto m = small_mixtral();
  // Unfolded ep 4: EP inside dp x cp = 4 (ranks 0, 2, 4, 6 with tp 2), edp 1.
  const auto unfolded = resolve(mixtral_plan(4, 0), m);
  const auto lu = plan::rank_layout(unfolded);
  EXPECT_EQ(lu.group(plan::GroupKind::kEp, 0), (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(lu.group(plan::GroupKind::kEdp, 0).size(), 1u);
  // Folded ep 8, etp 1: EP takes all 8 ranks (tp x dp), edp = 8 / 8 = 1 (unfolded, ep 8 breaks
  // ep-divides-dp-cp).
  const auto all = resolve(mixtral_plan(8, 1), m);
  EXPECT_EQ(plan::rank_layout(all).group(plan::GroupKind::kEp, 3).size(), 8u);
  EXPECT_THROW(resolve(mixtral_plan(8, 0), m), base::InputError);
  // Folded ep 4, etp 1: EP groups {0..3}, {4..7}; edp = 8 / 4 = 2 reduces expert gradients.
  const auto four = resolve(mixtral_plan(4, 1), m);
  const auto lf = plan::rank_layout(four);
  EXPECT_EQ(lf.group(plan::GroupKind::kEp, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(lf.group(plan::GroupKind::kEdp, 0), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(four.degrees.edp(), 2);
  // Folded ep 4, etp 2: etp groups are TP pairs, EP groups every other rank, edp 1.
  const auto two = resolve(mixtral_plan(4, 2), m);
  const auto l2 = plan::rank_layout(two);
  EXPECT_EQ(l2.group(plan::GroupKind::kEtp, 1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(l2.group(plan::GroupKind::kEp, 1), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(l2.group(plan::GroupKind::kEdp, 1).size(), 1u);
}

// Expert weights per rank: unfolded ep 4 holds 2 experts split by tp 2 (one expert's worth);
// folded ep 4 etp 1 holds 2 whole experts (twice that), folded ep 8 etp 1 one whole expert. The
// memory model's parameters (bf16, 2 B each, 2 MoE layers) differ by exactly that.
TEST(MoeFolding, ExpertWeightsAndMemoryFollowEtp) {
  const auto m = small_mixtral();
  const auto unfolded = resolve(mixtral_plan(4, 0), m);
  const auto four = resolve(mixtral_plan(4, 1), m);
  const auto eight = resolve(mixtral_plan(8, 1), m);
  const auto ops = [](const plan::ResolvedPlan& p) {
    return plan::detail::make_op_tables(p).moe_layer;
  };
  EXPECT_DOUBLE_EQ(expert_params(ops(unfolded)), kExpertParams);
  EXPECT_DOUBLE_EQ(expert_params(ops(four)), 2 * kExpertParams);
  EXPECT_DOUBLE_EQ(expert_params(ops(eight)), kExpertParams);
  const double delta = memory_per_stage(four)[0].parameters_bytes() -
                       memory_per_stage(unfolded)[0].parameters_bytes();
  EXPECT_DOUBLE_EQ(delta, 2 * kExpertParams * 2);
  // ZeRO-1 shards the experts' optimizer state over edp: 2 ranks folded at ep 4.
  pb::Plan z = mixtral_plan(4, 1);
  z.set_sharding(pb::SHARDING_ZERO1);
  EXPECT_EQ(resolve(z, m).expert_shard_degree(), 2);
}

// Folded etp 2, ep 4 (tp 2, SP: each rank routes its 2,048 tokens): the dispatch sends
// 2,048 x top-2 x 4,096 x 2 B, 3/4 of it away; the etp group gathers both ranks' tokens (2 x
// that before the 3/4), the experts run on 2 x 2,048 x 2 = 8,192 token-expert pairs at FFN
// 14,336 / 2; and the TP all-gather after mlp.norm is gone (no shared experts to feed).
TEST(MoeFolding, EtpCollectivesAroundTheExperts) {
  const auto plan = resolve(mixtral_plan(4, 2), small_mixtral());
  const auto ops = plan::detail::make_op_tables(plan).moe_layer;
  const double sent = 2048.0 * 2 * 4096 * 2;
  EXPECT_DOUBLE_EQ(op(ops, "moe.router").ep_alltoall_bytes, sent * 3 / 4);
  EXPECT_DOUBLE_EQ(op(ops, "moe.router").etp_comm_bytes, 2 * sent);
  EXPECT_DOUBLE_EQ(op(ops, "moe.experts.down").etp_comm_bytes, 2 * sent);
  EXPECT_EQ(op(ops, "moe.experts.up").shape, (std::vector<int64_t>{8192, 2 * 7168, 4096}));
  std::vector<std::string> forward;
  for (const auto& s : plan::detail::layer_program(ops, plan, pb::PHASE_FORWARD))
    if (s.kind == plan::detail::Step::Kind::kCollective) forward.push_back(s.name);
  EXPECT_EQ(forward, (std::vector<std::string>{"attn.norm.all_gather", "attn.out.reduce_scatter",
                                               "moe.router.all_to_all", "moe.router.etp.all_gather",
                                               "moe.experts.down.etp.reduce_scatter",
                                               "moe.experts.down.all_to_all"}));
  std::vector<std::string> backward;
  for (const auto& s : plan::detail::layer_program(ops, plan, pb::PHASE_BACKWARD))
    if (s.kind == plan::detail::Step::Kind::kCollective) backward.push_back(s.name);
  EXPECT_EQ(backward,
            (std::vector<std::string>{
                "moe.experts.down.grad.all_to_all", "moe.experts.down.grad.etp.all_gather",
                "moe.router.grad.etp.reduce_scatter", "moe.router.grad.all_to_all",
                "attn.out.grad.all_gather", "attn.norm.grad.reduce_scatter"}));
}

// Both engines price the folded plan alike where nothing contends (one node) and report the etp
// collectives as expert communication.
// (ep 8 at etp 1 draws EP from the TP ranks: the des job must carry etp to rebuild the groups.)
TEST(MoeFolding, EnginesAgreeOnOneNode) {
  for (const auto& [ep, etp] : {std::pair{4, 2}, std::pair{8, 1}}) {
    const auto plan = resolve(mixtral_plan(ep, etp), small_mixtral());
    const topologies::Topology topology(plan.cluster);
    const CostModels costs(topology, "bf16");
    const double a = simulate(plan, costs, EngineKind::kAnalytic).result.step_time_s();
    const double d = simulate(plan, costs, EngineKind::kDes).result.step_time_s();
    EXPECT_NEAR(d, a, 0.02 * a) << "ep " << ep << " etp " << etp;
  }
}

// DeepSeek-V3 cut to 4 layers (1 dense, 3 MoE: 256 experts of FFN 2,048, top-8, hidden 7,168)
// with its group-limited routing (8 groups, 4 per token) on two DGX H100s, ep 16 over dp 16.
pb::ModelSpec small_deepseek(bool limited) {
  pb::ModelSpec m = models::preset("deepseek-v3");
  m.set_num_layers(4);
  m.mutable_moe()->set_first_dense_layers(1);
  m.mutable_moe()->set_n_group(limited ? 8 : 0);
  m.mutable_moe()->set_topk_group(limited ? 4 : 0);
  return m;
}

pb::Plan deepseek_plan(int64_t ep) {
  pb::Plan p;
  p.set_model("deepseek-v3");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(16);
  p.mutable_job()->set_seq_len(4096);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(16);
  p.mutable_parallel()->set_ep(ep);
  p.set_micro_batch_size(1);
  return p;
}

double exposed_ep(const pb::SimResult& r) {
  for (const auto& e : r.breakdown().exposed_comm())
    if (e.name() == "ep") return e.seconds();
  return 0;
}

// EP group = ranks 0..15, nodes 0 and 1; rank i holds experts 16 i .. 16 i + 15, so each
// group of 32 experts sits on 2 ranks of one node: a token's 4 groups reach at most
// min(4, top-8, 2 nodes) = 2 nodes. The dispatch carries 2 copies of each of the rank's 4,096
// tokens instead of 8: 4,096 x 2 x 7,168 x 2 B x 15/16 (a quarter of the unlimited bytes).
TEST(NodeLimitedRouting, TwoNodeEpGroupSendsOneCopyPerNode) {
  const auto limited = resolve(deepseek_plan(16), small_deepseek(true), 2);
  const auto free = resolve(deepseek_plan(16), small_deepseek(false), 2);
  EXPECT_EQ(plan::ep_group_nodes(limited), 2);
  EXPECT_EQ(plan::ep_node_reach(limited), 2);
  EXPECT_EQ(plan::ep_node_reach(free), 0);
  const double token = 7168.0 * 2 * 15 / 16;
  EXPECT_DOUBLE_EQ(
      op(plan::detail::make_op_tables(limited).moe_layer, "moe.router").ep_alltoall_bytes,
      4096 * 2 * token);
  EXPECT_DOUBLE_EQ(op(plan::detail::make_op_tables(free).moe_layer, "moe.router").ep_alltoall_bytes,
                   4096 * 8 * token);
  // On one node (ep 8) the limit leaves the all-to-all alone: every expert is on the node.
  pb::Plan one = deepseek_plan(8);
  const auto single = resolve(one, small_deepseek(true), 2);
  EXPECT_EQ(plan::ep_group_nodes(single), 1);
  EXPECT_EQ(plan::ep_node_reach(single), 0);
  // The all-to-all is network-bound across the two nodes: a quarter of the bytes takes about a
  // quarter of the time (latency aside), in both engines.
  const topologies::Topology topology(limited.cluster);
  const CostModels costs(topology, "bf16");
  for (EngineKind e : {EngineKind::kAnalytic, EngineKind::kDes}) {
    const double with = exposed_ep(simulate(limited, costs, e).result);
    const double without = exposed_ep(simulate(free, costs, e).result);
    EXPECT_GT(without, 0) << to_string(e);
    EXPECT_LT(with, 0.3 * without) << to_string(e);
    EXPECT_GT(with, 0.2 * without) << to_string(e);
  }
}

// DeepEP (moe_dispatcher deepep) sends a token once per node holding one of its experts, with
// or without group-limited routing. Unlimited routing over the 2 nodes of ep 16 (128 of the 256
// experts on each): a token misses a node with chance C(128, 8) / C(256, 8), so it reaches
// 2 x (1 - that) nodes on average, about 1.99 copies instead of 8. alltoall sends all 8, also
// under group-limited routing.
TEST(NodeLimitedRouting, DeepEpSendsOneCopyPerNodeReached) {
  pb::Plan deepep = deepseek_plan(16);
  deepep.set_moe_dispatcher(pb::MOE_DISPATCHER_DEEPEP);
  const auto free = resolve(deepep, small_deepseek(false), 2);
  double missed = 1;  // C(128, 8) / C(256, 8) as a ratio of falling factorials
  for (int i = 0; i < 8; ++i) missed *= (128.0 - i) / (256.0 - i);
  const double reach = 2 * (1 - missed);
  EXPECT_NEAR(plan::ep_expected_node_reach(free), reach, 1e-12);
  EXPECT_NEAR(plan::dispatch_copies(free), reach, 1e-12);
  const double token = 7168.0 * 2 * 15 / 16;
  EXPECT_NEAR(op(plan::detail::make_op_tables(free).moe_layer, "moe.router").ep_alltoall_bytes,
              4096 * reach * token, 1e-3);
  // Group-limited routing bounds it further: min(2 nodes, the expected 1.99).
  const auto limited = resolve(deepep, small_deepseek(true), 2);
  EXPECT_NEAR(plan::dispatch_copies(limited), reach, 1e-12);
  // alltoall: top_k copies even where routing is group-limited; absent: as before the field.
  pb::Plan nccl = deepseek_plan(16);
  nccl.set_moe_dispatcher(pb::MOE_DISPATCHER_ALLTOALL);
  EXPECT_EQ(plan::dispatch_copies(resolve(nccl, small_deepseek(true), 2)), 0);
  EXPECT_EQ(plan::dispatch_copies(resolve(deepseek_plan(16), small_deepseek(true), 2)), 2);
  EXPECT_EQ(plan::dispatch_copies(resolve(deepseek_plan(16), small_deepseek(false), 2)), 0);
  // On one node (ep 8) nothing crosses the network: top_k copies.
  pb::Plan one = deepseek_plan(8);
  one.set_moe_dispatcher(pb::MOE_DISPATCHER_DEEPEP);
  EXPECT_EQ(plan::dispatch_copies(resolve(one, small_deepseek(false), 2)), 0);
}

}  // namespace
}  // namespace orrery::sim
