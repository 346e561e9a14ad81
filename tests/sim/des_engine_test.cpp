// The des engine: hand-checkable cases, agreement with the analytic engine where nothing
// contends, deadlock detection, determinism, and the symmetric mode against all ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

// A resolved plan on `nodes` DGX H100 nodes with its topology and cost models.
struct Case {
  std::unique_ptr<topologies::Topology> topology;
  std::unique_ptr<CostModels> costs;
  plan::ResolvedPlan plan;
};

Case make_case(const std::string& model, int64_t nodes, int64_t tp, int64_t pp, int64_t dp,
               int64_t global_batch, int64_t micro_batch, int64_t seq_len,
               const pb::CalibrationProfile* calibration = nullptr,
               pb::Sharding sharding = pb::SHARDING_NONE) {
  pb::Plan p;
  p.set_model(model);
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(global_batch);
  p.mutable_job()->set_seq_len(seq_len);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(tp);
  p.mutable_parallel()->set_pp(pp);
  p.mutable_parallel()->set_dp(dp);
  if (pp > 1) p.mutable_parallel()->set_schedule(pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
  p.set_micro_batch_size(micro_batch);
  if (sharding != pb::SHARDING_NONE) p.set_sharding(sharding);
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", nodes);
  Case c;
  c.plan = plan::resolve_plan(p, models::load_model(model), cluster);
  c.topology = std::make_unique<topologies::Topology>(c.plan.cluster);
  c.costs = std::make_unique<CostModels>(*c.topology, c.plan.precision.dtype, calibration);
  return c;
}

double relative(double a, double b) { return std::abs(a - b) / b; }

pb::ExecNode* add_node(pb::RankGraph* r, pb::NodeKind kind, int32_t stream,
                       const std::string& name) {
  pb::ExecNode* n = r->add_nodes();
  n->set_id(r->nodes_size() - 1);
  n->set_kind(kind);
  n->set_stream(stream);
  n->set_name(name);
  return n;
}

pb::RankGraph* add_rank(pb::ExecGraph& g, int64_t rank, int64_t device) {
  pb::RankGraph* r = g.add_ranks();
  r->set_rank(rank);
  r->set_device(device);
  for (auto s : plan::kStreams) r->add_streams(std::string(s));
  return r;
}

// One rank, compute only: the step is the sum of its ops' times.
//   step = sum_i costs.compute().seconds(H100, op_i)
TEST(DesEngine, OneRankComputeOnlyIsTheSumOfItsOps) {
  Case c = make_case("llama3-8b", 1, 1, 1, 8, 8, 1, 2048);
  pb::ExecGraph g;
  g.set_world_size(8);
  pb::RankGraph* r = add_rank(g, 0, 0);
  double expected = 0;
  const double flops[] = {4e12, 1e9, 3e11};
  const pb::OpClass classes[] = {pb::OP_CLASS_GEMM, pb::OP_CLASS_ELEMENTWISE,
                                 pb::OP_CLASS_ATTENTION};
  for (int i = 0; i < 3; ++i) {
    pb::ExecNode* n = add_node(r, pb::NODE_KIND_COMPUTE, plan::kCompute, "op" + std::to_string(i));
    n->set_op_class(classes[i]);
    n->set_flops(flops[i]);
    n->set_bytes_read(1e8);
    expected += c.costs->compute().seconds(plan::device_of(c.plan, 0), *n);
  }
  DesOptions o;
  o.graph = &g;
  const SimOutput out = simulate_des(c.plan, *c.costs, o);
  EXPECT_NEAR(out.result.step_time_s(), expected, 1e-9 * expected);
  EXPECT_NEAR(out.result.breakdown().compute_s(), expected, 1e-9 * expected);
  ASSERT_EQ(out.timeline.ranks_size(), 1);
  double t = 0;
  for (const auto& n : out.timeline.ranks(0).nodes()) {
    EXPECT_NEAR(n.start_s(), t, 1e-9);
    t += n.duration_s();
  }
  EXPECT_EQ(out.result.engine(), "des");
  EXPECT_GT(out.result.events(), 0);
}

// Two transfers into one GPU share its NVSwitch down-link: each takes twice as long as alone.
// With a calibrated point-to-point curve of 0 latency and the link's 450 GB/s, one transfer of
// 1 GB takes 1e9 / 450e9 = 2.22 ms alone and 4.44 ms when both run.
TEST(DesEngine, TwoFlowsOnOneLinkTakeTwiceAsLong) {
  pb::CalibrationProfile cal;
  auto* curve = cal.add_comm();
  curve->set_scope("intra_node");
  curve->set_latency_s(0);
  curve->set_bandwidth_bytes_per_s(450e9);
  Case c = make_case("llama3-8b", 1, 1, 1, 8, 8, 1, 2048, &cal);
  const double bytes = 1e9, alone = bytes / 450e9;
  auto transfer = [&](int senders) {
    pb::ExecGraph g;
    g.set_world_size(8);
    pb::RankGraph* sink = add_rank(g, 2, 2);
    for (int s = 0; s < senders; ++s) {
      pb::RankGraph* r = add_rank(g, s, s);
      pb::ExecNode* send = add_node(r, pb::NODE_KIND_SEND, plan::kSendNext, "send");
      send->set_peer(2), send->set_tag(s), send->set_comm_bytes(bytes);
      pb::ExecNode* recv =
          add_node(sink, pb::NODE_KIND_RECV, s == 0 ? plan::kRecvPrev : plan::kRecvNext,
                   "recv" + std::to_string(s));
      recv->set_peer(s), recv->set_tag(s), recv->set_comm_bytes(bytes);
    }
    DesOptions o;
    o.graph = &g;
    return simulate_des(c.plan, *c.costs, o).result.step_time_s();
  };
  EXPECT_NEAR(transfer(1), alone, 1e-6 * alone);
  EXPECT_NEAR(transfer(2), 2 * alone, 1e-6 * alone);
}

// Two ranks that wait for each other's message never finish: a clear error, not a hang.
TEST(DesEngine, DeadlockIsReported) {
  Case c = make_case("llama3-8b", 1, 1, 1, 8, 8, 1, 2048);
  pb::ExecGraph g;
  g.set_world_size(8);
  for (int r = 0; r < 2; ++r) {
    pb::RankGraph* rg = add_rank(g, r, r);
    pb::ExecNode* recv = add_node(rg, pb::NODE_KIND_RECV, plan::kRecvPrev, "recv.first");
    recv->set_peer(1 - r), recv->set_tag(7), recv->set_comm_bytes(1e6);
    pb::ExecNode* send = add_node(rg, pb::NODE_KIND_SEND, plan::kSendNext, "send.after");
    send->set_peer(1 - r), send->set_tag(7), send->set_comm_bytes(1e6);
    send->add_data_deps(0);
  }
  DesOptions o;
  o.graph = &g;
  try {
    simulate_des(c.plan, *c.costs, o);
    FAIL() << "expected a deadlock";
  } catch (const base::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock: 4 nodes can never run"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("waits at 'recv.first'"), std::string::npos) << e.what();
  }
}

// 2 ranks of one node, data-parallel, one micro-batch: every gradient bucket's all-reduce takes
// what the collective model says for 2 GPUs (nothing else shares their NVLinks), and the step
// agrees with the analytic engine.
TEST(DesEngine, TwoRankDataParallelAllReduce) {
  Case c = make_case("llama3-8b", 1, 4, 1, 2, 2, 1, 2048);
  DesOptions o;
  o.all_ranks = true;
  const SimOutput out = simulate_des(c.plan, *c.costs, o);
  int buckets = 0;
  for (const auto& n : out.timeline.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_COLLECTIVE || n.stream() != plan::kCommDp) continue;
    ++buckets;
    const double model =
        c.costs->collectives().estimate(n.collective(), {0, 4}, n.comm_bytes()).seconds;
    EXPECT_NEAR(n.duration_s(), model, 1e-6 * model) << n.name();
  }
  EXPECT_GT(buckets, 0);
  const double analytic = simulate_analytic(c.plan, *c.costs).result.step_time_s();
  EXPECT_LT(relative(out.result.step_time_s(), analytic), 0.02);
}

// Contention-free cases: within 2% of the analytic engine's closed form.
TEST(DesEngine, AgreesWithAnalyticDataParallelOnOneNode) {
  Case c = make_case("llama3-8b", 1, 1, 1, 8, 16, 1, 2048);
  const double des = simulate_des(c.plan, *c.costs).result.step_time_s();
  const double analytic = simulate_analytic(c.plan, *c.costs).result.step_time_s();
  EXPECT_LT(relative(des, analytic), 0.02) << des << " vs " << analytic;
}

// ZeRO-1's gradient reduce-scatter and parameter all-gather over 4 nodes of the rail-optimized
// fabric (rings): each channel leaves a node by the NIC it came in on (NCCL's PXN), so its network
// hops stay on one rail switch and no two flows meet; each takes what the closed form says, as
// alone. (Before, the ring left from the entry member's neighbour, crossed to the next rail
// through the spines and met other channels there: a 128-GPU ring ran at about half the closed
// form's rate.)
TEST(DesEngine, DataParallelRingAcrossNodesStaysOnItsRails) {
  Case c = make_case("llama3-8b", 4, 1, 1, 32, 32, 1, 2048, nullptr, pb::SHARDING_ZERO1);
  DesOptions o;
  o.all_ranks = true;
  const SimOutput out = simulate_des(c.plan, *c.costs, o);
  std::vector<int64_t> devices;
  for (int64_t r = 0; r < 32; ++r) devices.push_back(c.plan.device_of_rank[static_cast<size_t>(r)]);
  int rings = 0;
  for (const auto& n : out.timeline.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_COLLECTIVE || n.stream() != plan::kCommDp) continue;
    const CollectiveCost model =
        c.costs->collectives().estimate(n.collective(), devices, n.comm_bytes());
    ASSERT_EQ(model.algorithm, CollectiveAlgorithm::kRing) << n.name();
    ++rings;
    EXPECT_NEAR(n.duration_s(), model.seconds, 1e-6 * model.seconds) << n.name();
  }
  EXPECT_GT(rings, 0);
  // The step within 5%: des runs a part's copy-out beside the next part's gather (the compute
  // and the DP stream), which the closed form adds up (about 3% here).
  const double analytic = simulate_analytic(c.plan, *c.costs).result.step_time_s();
  EXPECT_LT(relative(out.result.step_time_s(), analytic), 0.05);
}

TEST(DesEngine, AgreesWithAnalyticTensorParallel) {
  Case c = make_case("llama3-8b", 1, 8, 1, 1, 4, 1, 4096);
  const double des = simulate_des(c.plan, *c.costs).result.step_time_s();
  const double analytic = simulate_analytic(c.plan, *c.costs).result.step_time_s();
  EXPECT_LT(relative(des, analytic), 0.02) << des << " vs " << analytic;
}

// 1F1B with 4 uniform stages: T = (M - 1)(F + B) + 4 (F + B) + 6 t_p2p + DP tail + optimizer.
TEST(DesEngine, AgreesWithAnalyticUniformPipeline) {
  Case c = make_case("llama3-8b", 1, 2, 4, 1, 8, 1, 2048);
  const double des = simulate_des(c.plan, *c.costs).result.step_time_s();
  const double analytic = simulate_analytic(c.plan, *c.costs).result.step_time_s();
  EXPECT_LT(relative(des, analytic), 0.02) << des << " vs " << analytic;
}

// A 2-stage 1F1B pipeline on 2 GPUs: stage 1 cannot start before stage 0's first forward and
// the transfer; the step agrees with (M - 1)(F + B) + 2 (F + B) + 2 t_p2p + tail.
TEST(DesEngine, TwoStagePipeline) {
  Case c = make_case("llama3-8b", 1, 4, 2, 1, 4, 1, 2048);
  const SimOutput out = simulate_des(c.plan, *c.costs);
  const double analytic = simulate_analytic(c.plan, *c.costs).result.step_time_s();
  EXPECT_LT(relative(out.result.step_time_s(), analytic), 0.02);
  ASSERT_EQ(out.timeline.ranks_size(), 2);
  double first_recv_end = -1, first_send_end = -1;
  for (const auto& n : out.timeline.ranks(0).nodes()) {
    if (n.kind() == pb::NODE_KIND_SEND && first_send_end < 0)
      first_send_end = n.start_s() + n.duration_s();
  }
  for (const auto& n : out.timeline.ranks(1).nodes()) {
    if (n.kind() == pb::NODE_KIND_RECV && first_recv_end < 0)
      first_recv_end = n.start_s() + n.duration_s();
  }
  EXPECT_DOUBLE_EQ(first_recv_end, first_send_end);
  const auto& b = out.result.breakdown();
  double sum = b.compute_s() + b.optimizer_s() + b.pipeline_bubble_s();
  for (const auto& e : b.exposed_comm()) sum += e.seconds();
  EXPECT_NEAR(sum, out.result.step_time_s(), 1e-9);
  EXPECT_GT(b.pipeline_bubble_s(), 0);
}

TEST(DesEngine, DeterministicToTheBit) {
  Case c = make_case("llama3-8b", 2, 4, 2, 2, 8, 1, 2048);
  const double a = simulate_des(c.plan, *c.costs).result.step_time_s();
  const double b = simulate_des(c.plan, *c.costs).result.step_time_s();
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
}

// Symmetric mode (tp = dp = 0 simulated, the rest mirrored) against every rank simulated, on
// 4 nodes where DP rings cross the rail-optimized fabric.
TEST(DesEngine, SymmetricAgreesWithAllRanks) {
  Case c = make_case("llama3-8b", 4, 4, 2, 4, 16, 1, 2048);
  DesOptions all;
  all.all_ranks = true;
  const SimOutput full = simulate_des(c.plan, *c.costs, all);
  const SimOutput sym = simulate_des(c.plan, *c.costs);
  EXPECT_EQ(full.timeline.ranks_size(), 32);
  EXPECT_EQ(sym.timeline.ranks_size(), 2);
  EXPECT_LT(relative(sym.result.step_time_s(), full.result.step_time_s()), 0.005)
      << sym.result.step_time_s() << " vs " << full.result.step_time_s();
}

// A context-parallel plan (Megatron's load-balanced ring attention, flash attention) on `nodes`
// DGX H100 nodes, placement tp,cp,dp,pp, 1F1B when pp > 1.
Case make_cp_case(int64_t nodes, int64_t tp, int64_t cp, int64_t pp, int64_t dp,
                  int64_t global_batch, int64_t seq_len) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(global_batch);
  p.mutable_job()->set_seq_len(seq_len);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  auto* q = p.mutable_parallel();
  q->set_tp(tp), q->set_cp(cp), q->set_pp(pp), q->set_dp(dp), q->set_sequence_parallel(tp > 1);
  if (pp > 1) q->set_schedule(pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
  p.set_micro_batch_size(1);
  p.set_sharding(pb::SHARDING_ZERO1);
  p.set_overlap_grad_reduce(true);
  Case c;
  c.plan = plan::resolve_plan(p, models::load_model("llama3-8b"),
                              topologies::load_cluster("dgx-h100", nodes));
  c.topology = std::make_unique<topologies::Topology>(c.plan.cluster);
  c.costs = std::make_unique<CostModels>(*c.topology, c.plan.precision.dtype);
  return c;
}

// Folded cp rings: cp = 0 stands for its ring (its transfers still go to its real successor on
// the real route; the other rings' flows are mirrors), against every rank simulated and against
// one rank per (cp, pp) index. tp8 cp4 on 4 nodes: every ring hop crosses the rail-optimized
// fabric between two nodes on the same rail, so the ring is uniform and folds to 1 simulated
// rank (4 unfolded, 32 in all). Asserted within 0.1%; measured: the same step time to the bit.
TEST(DesEngine, FoldedCpRingAgreesWithAllRanks) {
  Case c = make_cp_case(4, 8, 4, 1, 1, 8, 8192);
  DesOptions all, unfolded;
  all.all_ranks = true;
  unfolded.fold_cp = false;
  EXPECT_EQ(des_simulated_ranks(c.plan, *c.costs), 1);
  EXPECT_EQ(des_simulated_ranks(c.plan, *c.costs, unfolded), 4);
  const SimOutput full = simulate_des(c.plan, *c.costs, all);
  const SimOutput sym = simulate_des(c.plan, *c.costs);
  const SimOutput before = simulate_des(c.plan, *c.costs, unfolded);
  EXPECT_EQ(full.timeline.ranks_size(), 32);
  EXPECT_EQ(sym.timeline.ranks_size(), 1);
  EXPECT_LT(relative(sym.result.step_time_s(), full.result.step_time_s()), 1e-3)
      << sym.result.step_time_s() << " vs " << full.result.step_time_s();
  EXPECT_LT(relative(sym.result.step_time_s(), before.result.step_time_s()), 1e-3)
      << sym.result.step_time_s() << " vs " << before.result.step_time_s();
}

// tp8 cp4 dp2 on 8 nodes: the cp rings and the data-parallel gradient traffic (over dp x cp)
// share every node's NICs and the fabric.
TEST(DesEngine, FoldedCpRingUnderContentionAgreesWithAllRanks) {
  Case c = make_cp_case(8, 8, 4, 1, 2, 8, 8192);
  DesOptions all;
  all.all_ranks = true;
  const SimOutput full = simulate_des(c.plan, *c.costs, all);
  const SimOutput sym = simulate_des(c.plan, *c.costs);
  EXPECT_EQ(full.timeline.ranks_size(), 64);
  EXPECT_EQ(sym.timeline.ranks_size(), 1);
  EXPECT_LT(relative(sym.result.step_time_s(), full.result.step_time_s()), 1e-3)
      << sym.result.step_time_s() << " vs " << full.result.step_time_s();
}

// tp4 cp2 pp2 dp2 on 4 nodes: cp pairs on NVLink inside a node, pipeline and data-parallel
// traffic across the fabric; the folded run simulates one rank per stage (2 of 32).
TEST(DesEngine, FoldedCpRingWithPipelineAndDataParallelAgreesWithAllRanks) {
  Case c = make_cp_case(4, 4, 2, 2, 2, 16, 8192);
  DesOptions all;
  all.all_ranks = true;
  const SimOutput full = simulate_des(c.plan, *c.costs, all);
  const SimOutput sym = simulate_des(c.plan, *c.costs);
  EXPECT_EQ(sym.timeline.ranks_size(), 2);
  EXPECT_LT(relative(sym.result.step_time_s(), full.result.step_time_s()), 1e-3)
      << sym.result.step_time_s() << " vs " << full.result.step_time_s();
}

// tp4 cp4 on 2 nodes: the ring's hops alternate NVLink (inside a node) and the network, so its
// ranks do not keep step and the ring is not folded: one rank per cp index.
TEST(DesEngine, NonUniformCpRingIsNotFolded) {
  Case c = make_cp_case(2, 4, 4, 1, 1, 4, 8192);
  EXPECT_EQ(des_simulated_ranks(c.plan, *c.costs), 4);
  DesOptions all;
  all.all_ranks = true;
  const SimOutput full = simulate_des(c.plan, *c.costs, all);
  const SimOutput sym = simulate_des(c.plan, *c.costs);
  EXPECT_EQ(sym.timeline.ranks_size(), 4);
  EXPECT_LT(relative(sym.result.step_time_s(), full.result.step_time_s()), 1e-3)
      << sym.result.step_time_s() << " vs " << full.result.step_time_s();
}

}  // namespace
}  // namespace orrery::sim
