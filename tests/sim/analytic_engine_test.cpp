// The analytic engine against its closed form, recomputed here from the public cost models:
//   F_p, B_p   pipeline rank p's forward / backward time for one micro-batch: the sum over its
//              ops of ComputeCostModel::seconds (backward: backward FLOPs, twice the forward
//              bytes), plus TP collectives (none here: tp = 1 throughout the hand checks)
//   pp = 1:       T = M (F + B) + tail
//   1F1B/GPipe:   T = (M - 1) max_p x_p + sum_p x_p + 2 sum_p t_p2p(p -> p+1) + max_p tail_p
//   interleaved:  T = M max_p x_p + (pp - 1) / vp max_p x_p + 2 sum t_p2p + max_p tail_p
// with x_p = F_p + B_p and tail_p = (without overlap) the DP all-reduce of each 40M-parameter
// bucket of the rank's gradients in fp32, one after another, + the AdamW step.
#include <gtest/gtest.h>

#include <numeric>

#include "orrery/models/layer_ops.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

struct Bench {
  pb::ClusterSpec cluster;
  topologies::Topology topology;
  CostModels costs;
  explicit Bench(pb::ClusterSpec c)
      : cluster(std::move(c)), topology(cluster), costs(topology, "bf16") {}
};

pb::Plan base(const std::string& model, int64_t global_batch, int64_t seq) {
  pb::Plan p;
  p.set_model(model);
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(global_batch);
  p.mutable_job()->set_seq_len(seq);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.set_micro_batch_size(1);
  return p;
}

plan::ResolvedPlan resolve(const pb::Plan& p, const pb::ClusterSpec& cluster) {
  return plan::resolve_plan(p, models::load_model(p.model()), cluster);
}

double comm(const pb::SimResult& r, const std::string& name) {
  for (const auto& e : r.breakdown().exposed_comm()) {
    if (e.name() == name) return e.seconds();
  }
  return 0;
}

void expect_breakdown_adds_up(const pb::SimResult& r) {
  const auto& b = r.breakdown();
  double sum = b.compute_s() + b.pipeline_bubble_s() + b.optimizer_s();
  for (const auto& e : b.exposed_comm()) {
    EXPECT_GT(e.seconds(), 0) << e.name();
    sum += e.seconds();
  }
  EXPECT_GT(r.step_time_s(), 0);
  EXPECT_NEAR(sum, r.step_time_s(), r.step_time_s() * 1e-12);
  EXPECT_GE(b.pipeline_bubble_s(), 0);
  EXPECT_GE(b.recompute_s(), 0);
  EXPECT_LE(b.recompute_s(), b.compute_s());
}

// One pass over `ops` on `device`, as the engine costs a compute op (no collectives: tp = 1).
double pass_seconds(const CostModels& costs, const pb::DeviceSpec& device,
                    const std::vector<models::LayerOp>& ops, bool backward) {
  double t = 0;
  for (const auto& op : ops) {
    const double flops = backward ? op.backward_flops : op.forward_flops;
    const double bytes = backward
                             ? 2 * (op.forward_bytes_read + op.forward_bytes_written) +
                                   op.backward_extra_bytes_read + op.backward_extra_bytes_written
                             : op.forward_bytes_read + op.forward_bytes_written;
    t += costs.compute().seconds(device, op.op_class, flops, bytes);
  }
  return t;
}

// x_p = F_p + B_p of pipeline rank p: its virtual stages' layers, the embedding on stage 0 and
// the head on the last.
double stage_seconds(const plan::ResolvedPlan& plan, const CostModels& costs, int64_t p) {
  models::ShardContext ctx;
  ctx.micro_batch = plan.micro_batch_size;
  ctx.seq_len = plan.seq_len;
  const auto& m = plan.model;
  const auto& dev = plan::device_of(plan, p);
  auto both = [&](const std::vector<models::LayerOp>& ops) {
    return pass_seconds(costs, dev, ops, false) + pass_seconds(costs, dev, ops, true);
  };
  const double layer = both(models::layer_ops(m, models::LayerPart::kDecoder, 0, ctx));
  const int64_t stages = plan.degrees.pp * plan.degrees.vp;
  double x = 0;
  for (int64_t c = 0; c < plan.degrees.vp; ++c) {
    const int64_t s = c * plan.degrees.pp + p;
    if (s == 0) x += both(models::layer_ops(m, models::LayerPart::kEmbedding, 0, ctx));
    x += static_cast<double>(plan.layers_per_stage[static_cast<size_t>(s)]) * layer;
    if (s == stages - 1) x += both(models::layer_ops(m, models::LayerPart::kHead, 0, ctx));
  }
  return x;
}

// Parameters of pipeline rank p at tp = 1, part by part in forward order (embedding, layers,
// head): the units gradient buckets are filled from.
std::vector<double> stage_parts(const plan::ResolvedPlan& plan, int64_t p) {
  models::ShardContext ctx;
  ctx.seq_len = plan.seq_len;
  auto params = [](const std::vector<models::LayerOp>& ops) {
    double n = 0;
    for (const auto& op : ops) n += op.parameters;
    return n;
  };
  const auto& m = plan.model;
  const int64_t stages = plan.degrees.pp * plan.degrees.vp;
  std::vector<double> parts;
  for (int64_t c = 0; c < plan.degrees.vp; ++c) {
    const int64_t s = c * plan.degrees.pp + p;
    if (s == 0)
      parts.push_back(params(models::layer_ops(m, models::LayerPart::kEmbedding, 0, ctx)));
    for (int64_t l = 0; l < plan.layers_per_stage[static_cast<size_t>(s)]; ++l) {
      parts.push_back(params(models::layer_ops(m, models::LayerPart::kDecoder, 0, ctx)));
    }
    if (s == stages - 1)
      parts.push_back(params(models::layer_ops(m, models::LayerPart::kHead, 0, ctx)));
  }
  return parts;
}

double stage_params(const plan::ResolvedPlan& plan, int64_t p) {
  const auto parts = stage_parts(plan, p);
  return std::accumulate(parts.begin(), parts.end(), 0.0);
}

// Without overlap: gradient buckets (Megatron's default size, max(40M, 1M x dp) parameters) are
// filled in backward order with whole parts and closed once they reach the size — for llama3-8b
// every part (head 525,340,672; each layer 218,112,000; embedding 525,336,576) is a bucket of its
// own — all-reduced in fp32 after the last backward, serially; then AdamW: 12 FLOPs per
// parameter, reading master 4 + grad 4 + moments 8 and writing master 4 + moments 8 + bf16
// copy 2 = 30 bytes each.
double tail_seconds(const plan::ResolvedPlan& plan, const CostModels& costs, int64_t rank,
                    const std::vector<double>& parts) {
  const plan::RankLayout layout(plan.degrees, plan.placement);
  std::vector<int64_t> devs;
  for (int64_t r : layout.group(plan::GroupKind::kDp, rank))
    devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
  double t = 0;
  if (devs.size() > 1) {
    double filled = 0;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      filled += *it;
      if (filled >= 40e6) {
        t += costs.collectives().estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devs, filled * 4).seconds;
        filled = 0;
      }
    }
    if (filled > 0)
      t += costs.collectives().estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devs, filled * 4).seconds;
  }
  const double params = std::accumulate(parts.begin(), parts.end(), 0.0);
  t += costs.compute().seconds(plan::device_of(plan, rank), pb::OP_CLASS_OPTIMIZER, 12 * params,
                               30 * params);
  return t;
}

TEST(AnalyticEngine, OneStageStepIsMicroBatchesTimesForwardBackwardPlusTail) {
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  pb::Plan p = base("llama3-8b", 16, 2048);
  p.mutable_parallel()->set_dp(8);  // M = 16 / 8 = 2
  const plan::ResolvedPlan plan = resolve(p, h100.cluster);
  const SimOutput out = simulate_analytic(plan, h100.costs);
  const double x = stage_seconds(plan, h100.costs, 0);
  // 8,030,261,248 parameters in 34 buckets (head, 32 layers, embedding).
  const double params = stage_params(plan, 0);
  EXPECT_EQ(params, 8030261248.0);
  const double tail = tail_seconds(plan, h100.costs, 0, stage_parts(plan, 0));
  EXPECT_NEAR(out.result.step_time_s(), 2 * x + tail, 1e-12 * out.result.step_time_s());
  expect_breakdown_adds_up(out.result);
  EXPECT_EQ(out.result.breakdown().pipeline_bubble_s(), 0);
  // Exposed DP is the bucket chain; the optimizer the AdamW step.
  const double optimizer = h100.costs.compute().seconds(
      plan::device_of(plan, 0), pb::OP_CLASS_OPTIMIZER, 12 * params, 30 * params);
  EXPECT_NEAR(out.result.breakdown().optimizer_s(), optimizer, 1e-15);
  EXPECT_NEAR(comm(out.result, "dp"), tail - optimizer, 1e-12);
  // Twice the micro-batches adds exactly 2 (F + B).
  p.mutable_job()->set_global_batch_size(32);
  const double longer =
      simulate_analytic(resolve(p, h100.cluster), h100.costs).result.step_time_s();
  EXPECT_NEAR(longer - out.result.step_time_s(), 2 * x, 1e-12 * longer);
}

struct PipelineFigures {
  // Per stage: one micro-batch's forward and backward, its receives included (x), and its tail.
  std::vector<double> x, tail;
  double p2p = 0;  // the fill: every boundary crossed once each way
};

PipelineFigures figures(const plan::ResolvedPlan& plan, const CostModels& costs) {
  PipelineFigures f;
  const plan::RankLayout layout(plan.degrees, plan.placement);
  // One micro-batch of hidden states: 1 x 2048 x 4096 x 2 B = 16,777,216 bytes per hop, sent
  // forward (activations) and backward (gradients). Every hop here stays in one node: one time.
  const double bytes = 1.0 * plan.seq_len * plan.model.hidden_size() * 2;
  const int64_t pp = plan.degrees.pp, vp = plan.degrees.vp;
  const double hop = costs.collectives().p2p_seconds(
      plan.device_of_rank[static_cast<size_t>(layout.rank({0, 0, 0, 0}))],
      plan.device_of_rank[static_cast<size_t>(layout.rank({0, 0, 0, 1}))], bytes);
  for (int64_t p = 0; p < pp; ++p) {
    const int64_t rank = layout.rank({0, 0, 0, p});
    // A stage receives vp activations and vp gradients per micro-batch, less the first chunk's
    // activations on stage 0 and the last chunk's gradients on the last stage, each on its path.
    const double receives = static_cast<double>(2 * vp - (p == 0 ? 1 : 0) - (p == pp - 1 ? 1 : 0));
    f.x.push_back(stage_seconds(plan, costs, p) + receives * hop);
    f.tail.push_back(tail_seconds(plan, costs, rank, stage_parts(plan, p)));
    if (p + 1 < pp) f.p2p += 2 * hop;
  }
  return f;
}

// The bubble the breakdown reports: the step minus the critical rank's own work, p2p and tail,
// where the critical rank is the one with the most work of its own, M x_p + tail_p.
double expected_bubble(const PipelineFigures& f, double m, double step) {
  size_t c = 0;
  for (size_t p = 1; p < f.x.size(); ++p) {
    if (m * f.x[p] + f.tail[p] > m * f.x[c] + f.tail[c]) c = p;
  }
  return step - (m * f.x[c] + f.tail[c]);
}

// The precision-aware optimizer's bf16 moments (optimizer_state_dtype bf16): AdamW reads 4 + 4
// + 4 and writes 4 + 4 + 2 bytes a parameter (22, from 30), and each rank keeps 4 + 4 bytes of
// master weights and moments a parameter instead of 4 + 8; the des engine prices the same step.
TEST(AnalyticEngine, Bf16MomentsShrinkTheOptimizerStepAndState) {
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  pb::Plan p = base("llama3-8b", 16, 2048);
  p.mutable_parallel()->set_dp(8);
  const plan::ResolvedPlan fp32 = resolve(p, h100.cluster);
  p.set_optimizer_state_dtype(pb::OPTIMIZER_STATE_DTYPE_BF16);
  const plan::ResolvedPlan bf16 = resolve(p, h100.cluster);
  const SimOutput out = simulate_analytic(bf16, h100.costs);
  const double params = stage_params(bf16, 0);
  const double optimizer = h100.costs.compute().seconds(
      plan::device_of(bf16, 0), pb::OP_CLASS_OPTIMIZER, 12 * params, 22 * params);
  EXPECT_NEAR(out.result.breakdown().optimizer_s(), optimizer, 1e-15);
  EXPECT_LT(optimizer, simulate_analytic(fp32, h100.costs).result.breakdown().optimizer_s());
  EXPECT_DOUBLE_EQ(memory_per_stage(bf16)[0].optimizer_bytes(), 8 * params);
  EXPECT_DOUBLE_EQ(memory_per_stage(fp32)[0].optimizer_bytes(), 12 * params);
  const double des = simulate(bf16, h100.costs, EngineKind::kDes).result.step_time_s();
  EXPECT_NEAR(des, out.result.step_time_s(), 0.02 * out.result.step_time_s());
}

TEST(AnalyticEngine, OneFOneBBubbleIsTheOtherStagesWork) {
  // llama3-8b, pp 4, dp 2 on 8 GPUs, M = 16 / 2 = 8.
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  pb::Plan p = base("llama3-8b", 16, 2048);
  p.mutable_parallel()->set_pp(4);
  p.mutable_parallel()->set_dp(2);
  const plan::ResolvedPlan plan = resolve(p, h100.cluster);
  const pb::SimResult r = simulate_analytic(plan, h100.costs).result;
  const PipelineFigures f = figures(plan, h100.costs);
  const double max_x = *std::max_element(f.x.begin(), f.x.end());
  const double sum_x = std::accumulate(f.x.begin(), f.x.end(), 0.0);
  const double max_tail = *std::max_element(f.tail.begin(), f.tail.end());
  // T = (M - 1) max x + sum x + max tail, the receives in x (sum x holds the fill's crossings);
  // the critical stage 3 receives one activation per micro-batch.
  const double step = 7 * max_x + sum_x + max_tail;
  EXPECT_NEAR(r.step_time_s(), step, 1e-12 * step);
  EXPECT_NEAR(comm(r, "pp"), 8 * f.p2p / 6, 1e-15);
  expect_breakdown_adds_up(r);
  EXPECT_NEAR(r.breakdown().pipeline_bubble_s(), expected_bubble(f, 8, step), 1e-12 * step);
  // With uniform stages the bubble is (pp - 1)(F + B). Stages 1 and 2 (8 layers each) are
  // uniform; stage 3 adds the LM head, so here the critical stage is 3 and the bubble is
  // x_0 + x_1 + x_2, which is 3 x_1 plus the embedding's cost on stage 0.
  EXPECT_EQ(f.x[1], f.x[2]);
  EXPECT_GT(f.x[3], f.x[1]);
  EXPECT_NEAR(r.breakdown().pipeline_bubble_s(), f.x[0] + f.x[1] + f.x[2] + (max_tail - f.tail[3]),
              1e-12 * step);
  // Stage 0 carries the embedding: its lookups are cheap, but its backward passes over the
  // 525M-entry table's gradient (models' backward_extra_bytes), 6.3 GB a micro-batch: about 7%.
  EXPECT_GT(f.x[0], 1.03 * f.x[1]);
  EXPECT_LT(f.x[0], 1.10 * f.x[1]);
}

TEST(AnalyticEngine, InterleavingShrinksTheBubbleByVp) {
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  pb::Plan p = base("llama3-8b", 16, 2048);
  p.mutable_parallel()->set_pp(4);
  p.mutable_parallel()->set_dp(2);
  p.mutable_parallel()->set_vp(2);
  const plan::ResolvedPlan plan = resolve(p, h100.cluster);
  const pb::SimResult r = simulate_analytic(plan, h100.costs).result;
  const PipelineFigures f = figures(plan, h100.costs);
  const double max_x = *std::max_element(f.x.begin(), f.x.end());
  const double max_tail = *std::max_element(f.tail.begin(), f.tail.end());
  // T = M max x + (pp - 1) / vp max x + the fill's crossings + max tail, M = 8, (pp - 1) / vp = 3
  // / 2.
  const double step = 8 * max_x + 1.5 * max_x + f.p2p + max_tail;
  EXPECT_NEAR(r.step_time_s(), step, 1e-12 * step);
  expect_breakdown_adds_up(r);
  EXPECT_NEAR(r.breakdown().pipeline_bubble_s(), expected_bubble(f, 8, step), 1e-12 * step);

  // The fill/drain term is (pp - 1) / vp of the slowest rank's F + B: with uniform stages the
  // bubble is (pp - 1)(F + B) / vp, 1/vp of 1F1B's. Here rank 3 (8 layers + LM head) is the
  // slowest and the critical one, so the bubble is exactly 3/2 x_3 and the fill's crossings.
  const size_t slowest =
      static_cast<size_t>(std::max_element(f.x.begin(), f.x.end()) - f.x.begin());
  EXPECT_EQ(slowest, 3u);
  EXPECT_NEAR(r.breakdown().pipeline_bubble_s(), 1.5 * f.x[3] + f.p2p, 1e-12 * step);
  // Against vp = 1 (1F1B, bubble x_0 + x_1 + x_2 on the same work): smaller, by less than 1/vp
  // because the stages are not uniform (x_3 = 1.27 x_1: 1.5 x 1.27 / 3 = 0.63).
  pb::Plan q = p;
  q.mutable_parallel()->set_vp(1);
  const pb::SimResult one = simulate_analytic(resolve(q, h100.cluster), h100.costs).result;
  EXPECT_LT(r.breakdown().pipeline_bubble_s(), one.breakdown().pipeline_bubble_s());
  const PipelineFigures g = figures(resolve(q, h100.cluster), h100.costs);
  EXPECT_NEAR(one.breakdown().pipeline_bubble_s(), g.x[0] + g.x[1] + g.x[2], 1e-12 * step);
  EXPECT_LT(r.step_time_s(), one.step_time_s());
}

// dgx-h100 with every NIC and switch link scaled by `k`.
pb::ClusterSpec scaled_network(int64_t nodes, double k) {
  pb::ClusterSpec c = topologies::load_cluster("dgx-h100", nodes);
  auto* link = c.mutable_node_types(0)->mutable_nic()->mutable_link();
  link->set_bandwidth_bytes_per_s(link->bandwidth_bytes_per_s() * k);
  auto* sw = c.mutable_fabric()->mutable_switch_link();
  sw->set_bandwidth_bytes_per_s(sw->bandwidth_bytes_per_s() * k);
  return c;
}

TEST(AnalyticEngine, MoreDataParallelBandwidthNeverSlowsTheStep) {
  // tp 8 inside each node, dp 2 across 2 nodes: the gradient all-reduce crosses the network.
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap_grad_reduce" : "no overlap");
    double previous = std::numeric_limits<double>::infinity();
    double previous_dp = std::numeric_limits<double>::infinity();
    for (double k : {0.25, 0.5, 1.0, 2.0, 4.0}) {
      Bench s(scaled_network(2, k));
      pb::Plan p = base("llama3-8b", 16, 2048);
      p.mutable_parallel()->set_tp(8);
      p.mutable_parallel()->set_dp(2);
      p.set_overlap_grad_reduce(overlap);
      const pb::SimResult r = simulate_analytic(resolve(p, s.cluster), s.costs).result;
      expect_breakdown_adds_up(r);
      EXPECT_LE(r.step_time_s(), previous) << "x" << k;
      EXPECT_LE(comm(r, "dp"), previous_dp) << "x" << k;
      if (!overlap) {
        EXPECT_LT(r.step_time_s(), previous) << "x" << k;  // the tail is all exposed
      }
      previous = r.step_time_s();
      previous_dp = comm(r, "dp");
    }
  }
}

TEST(AnalyticEngine, BreakdownAddsUpAcrossPlans) {
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  std::vector<std::pair<std::string, pb::Plan>> plans;
  {
    pb::Plan p = base("llama3-8b", 8, 2048);
    p.mutable_parallel()->set_tp(2), p.mutable_parallel()->set_pp(2),
        p.mutable_parallel()->set_dp(2);
    p.mutable_parallel()->set_sequence_parallel(true);
    p.set_overlap_grad_reduce(true);
    plans.push_back({"tp2 sp pp2 dp2", p});
  }
  {
    pb::Plan p = base("llama3-8b", 4, 4096);
    p.mutable_parallel()->set_tp(2), p.mutable_parallel()->set_cp(2),
        p.mutable_parallel()->set_dp(2);
    plans.push_back({"tp2 cp2 dp2", p});
  }
  {
    pb::Plan p = base("mixtral-8x7b", 8, 2048);
    p.mutable_parallel()->set_tp(2), p.mutable_parallel()->set_dp(4),
        p.mutable_parallel()->set_ep(4);
    plans.push_back({"mixtral tp2 dp4 ep4", p});
  }
  {
    pb::Plan p = base("llama3-8b", 16, 2048);
    p.mutable_parallel()->set_dp(8);
    p.set_sharding(pb::SHARDING_FSDP);
    p.set_prefetch_buckets(1);
    p.set_recompute(pb::RECOMPUTE_FULL);
    plans.push_back({"fsdp full recompute", p});
  }
  {
    pb::Plan p = base("llama3-8b", 16, 2048);
    p.mutable_parallel()->set_tp(2), p.mutable_parallel()->set_dp(4);
    p.set_sharding(pb::SHARDING_ZERO1);
    p.set_overlap_param_gather(true);
    p.set_recompute(pb::RECOMPUTE_SELECTIVE);
    plans.push_back({"zero1 overlap selective", p});
  }
  for (const auto& [name, p] : plans) {
    SCOPED_TRACE(name);
    const plan::ResolvedPlan plan = resolve(p, h100.cluster);
    const pb::SimResult r = simulate_analytic(plan, h100.costs).result;
    expect_breakdown_adds_up(r);
    EXPECT_EQ(r.engine(), "analytic");
    EXPECT_EQ(r.memory_size(), plan.degrees.pp);
    // tokens/s and MFU from the step: tokens = global batch x seq; model FLOPs =
    // training_flops_per_token x tokens over 8 x 989 TFLOPS (H100 bf16 dense).
    const double tokens = static_cast<double>(p.job().global_batch_size() * p.job().seq_len());
    EXPECT_NEAR(r.tokens_per_s(), tokens / r.step_time_s(), 1e-9 * r.tokens_per_s());
    const double model_flops =
        models::model_stats(plan.model, plan.seq_len).training_flops_per_token * tokens;
    EXPECT_NEAR(r.mfu(), model_flops / (r.step_time_s() * 8 * 989e12), 1e-12);
    if (plan.recompute() == pb::RECOMPUTE_NONE) {
      EXPECT_DOUBLE_EQ(r.hfu(), r.mfu());
      EXPECT_EQ(r.breakdown().recompute_s(), 0);
    } else {
      EXPECT_GT(r.hfu(), r.mfu());
      EXPECT_GT(r.breakdown().recompute_s(), 0);
    }
    EXPECT_GT(r.mfu(), 0.05);
    EXPECT_LT(r.mfu(), 0.8);
  }
}

TEST(AnalyticEngine, FullRecomputeHfuCountsTheExtraForward) {
  // Full recomputation re-runs every layer's forward: the hardware FLOPs exceed the model FLOPs
  // by the layers' forward FLOPs over all ranks and micro-batches, i.e.
  // hfu - mfu = (layers' forward FLOPs per token x tokens) / (step x peak).
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  pb::Plan p = base("llama3-8b", 16, 2048);
  p.mutable_parallel()->set_dp(8);
  p.set_recompute(pb::RECOMPUTE_FULL);
  const plan::ResolvedPlan plan = resolve(p, h100.cluster);
  const pb::SimResult r = simulate_analytic(plan, h100.costs).result;
  models::ShardContext ctx;
  ctx.seq_len = 2048;
  double layer_forward = 0;
  for (const auto& op : models::layer_ops(plan.model, models::LayerPart::kDecoder, 0, ctx))
    layer_forward += op.forward_flops;
  const double recompute = 32 * layer_forward * 16;  // per sequence x 16 sequences
  EXPECT_NEAR((r.hfu() - r.mfu()) * r.step_time_s() * 8 * 989e12, recompute, 1e-9 * recompute);
}

TEST(AnalyticEngine, SelectiveRecomputeUnderCpCountsTheAttentionForward) {
  // Selective recomputation re-runs the attention core's forward before its backward. With CP the
  // core is a ring of cp pieces; the recomputed pieces are forward work all the same. Over all
  // ranks per step: causal attention forward = 1/2 x 2 x 32 heads x s^2 x (128 + 128) per layer
  // and sequence = 8192 s^2; s = 4096, 32 layers, 4 sequences: 8192 x 4096^2 x 32 x 4
  // = 17,592,186,044,416 FLOPs, which hfu - mfu must account for.
  Bench h100(topologies::load_cluster("dgx-h100", 1));
  pb::Plan p = base("llama3-8b", 4, 4096);
  p.mutable_parallel()->set_tp(2), p.mutable_parallel()->set_cp(2), p.mutable_parallel()->set_dp(2);
  p.set_recompute(pb::RECOMPUTE_SELECTIVE);
  const pb::SimResult r = simulate_analytic(resolve(p, h100.cluster), h100.costs).result;
  const double recompute = 8192.0 * 4096 * 4096 * 32 * 4;
  EXPECT_GT(r.breakdown().recompute_s(), 0);
  EXPECT_NEAR((r.hfu() - r.mfu()) * r.step_time_s() * 8 * 989e12, recompute, 1e-9 * recompute);
}

TEST(AnalyticEngine, IsDeterministic) {
  pb::Plan p = base("mixtral-8x7b", 8, 2048);
  p.mutable_parallel()->set_tp(2), p.mutable_parallel()->set_dp(4), p.mutable_parallel()->set_ep(4);
  Bench a(topologies::load_cluster("dgx-h100", 1));
  Bench b(topologies::load_cluster("dgx-h100", 1));
  const plan::ResolvedPlan plan = resolve(p, a.cluster);
  const std::string first = simulate_analytic(plan, a.costs).result.SerializeAsString();
  EXPECT_EQ(simulate_analytic(plan, a.costs).result.SerializeAsString(), first);
  EXPECT_EQ(simulate_analytic(resolve(p, b.cluster), b.costs).result.SerializeAsString(), first);
}

}  // namespace
}  // namespace orrery::sim
