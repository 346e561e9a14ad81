// Overlap as the frameworks do it (docs/simulator.md, "Overlap as the frameworks do it"): TP
// communication pipelined with its GEMMs (tp_comm_overlap), the gradient reduction's dtype
// (grad_reduce_dtype) and the CP ring's exchanges beside the attention pieces, each on a case
// checked by hand from the cost models, and the analytic and des engines agreeing within 2% where
// nothing contends (one DGX H100: every transfer has its own NVLink ports).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

// tp 8 with sequence parallelism on one DGX H100: `micro_batches` micro-batches of one sequence
// of `seq` tokens (llama3-8b unless the plan names another model).
pb::Plan tp_plan(bool overlap, int64_t chunks = 0, int64_t micro_batches = 2, int64_t seq = 4096) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.mutable_job()->set_global_batch_size(micro_batches);
  p.mutable_job()->set_seq_len(seq);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(8);
  p.mutable_parallel()->set_sequence_parallel(true);
  p.set_micro_batch_size(1);
  p.set_tp_comm_overlap(overlap);
  p.set_tp_comm_overlap_chunks(chunks);
  return p;
}

struct Fixture {
  pb::ClusterSpec cluster;
  topologies::Topology topology;
  CostModels costs;
  explicit Fixture(int64_t nodes = 1)
      : cluster(topologies::load_cluster("dgx-h100", nodes)),
        topology(cluster),
        costs(topology, "bf16") {}
  plan::ResolvedPlan resolve(const pb::Plan& p) const {
    return plan::resolve_plan(p, models::preset(p.model()), cluster);
  }
  double step(const pb::Plan& p, EngineKind engine) const {
    return simulate(resolve(p), costs, engine).result.step_time_s();
  }
};

double exposed(const pb::SimResult& r, const std::string& name) {
  for (const auto& e : r.breakdown().exposed_comm()) {
    if (e.name() == name) return e.seconds();
  }
  return 0;
}

TEST(TpCommOverlap, DefaultsToFourChunksAndNeedsSequenceParallelism) {
  const Fixture f;
  EXPECT_EQ(f.resolve(tp_plan(true)).plan.tp_comm_overlap_chunks(), 4);
  EXPECT_EQ(f.resolve(tp_plan(true, 3)).plan.tp_comm_overlap_chunks(), 3);
  // Left alone without the overlap: the plan resolves as it always did.
  EXPECT_EQ(f.resolve(tp_plan(false)).plan.tp_comm_overlap_chunks(), 0);
  pb::Plan no_sp = tp_plan(true);
  no_sp.mutable_parallel()->set_sequence_parallel(false);
  EXPECT_THROW(f.resolve(no_sp), base::InputError);
  EXPECT_THROW(f.resolve(tp_plan(true, 1)), base::InputError);
  EXPECT_THROW(f.resolve(tp_plan(false, 4)), base::InputError);
}

// Each decoder layer pass has four overlapped collectives (forward: the all-gathers before
// attn.qkv and mlp.up, the reduce-scatters after attn.out and mlp.down; backward: the
// all-gathers before attn.out's and mlp.down's backward, the reduce-scatters after attn.qkv's and
// mlp.up's), each split into 4 pieces on comm.tp beside 4 GEMM pieces: 32 layers x 2 passes x 4
// x 4 = 1,024 pieces per micro-batch. The head's all-gather before the output layer stays
// blocking, as Megatron-core's output layer has no userbuffers. The pieces move the collectives'
// bytes, and the GEMM pieces the GEMMs' FLOPs.
TEST(TpCommOverlap, LowersChunkedCollectivesBesideGemmPieces) {
  const Fixture f;
  plan::LowerOptions o;
  o.ranks = {0};
  const pb::ExecGraph on = plan::lower(f.resolve(tp_plan(true, 0, 1)), o);
  const pb::ExecGraph off = plan::lower(f.resolve(tp_plan(false, 0, 1)), o);
  ASSERT_EQ(on.ranks(0).streams_size(), 9);
  EXPECT_EQ(on.ranks(0).streams(plan::kCommTp), "comm.tp");
  EXPECT_EQ(off.ranks(0).streams_size(), 8);
  auto sum = [](const pb::ExecGraph& g, auto pick) {
    double s = 0;
    int n = 0;
    for (const auto& node : g.ranks(0).nodes())
      if (pick(node)) s += node.comm_bytes() + node.flops(), ++n;
    return std::pair{s, n};
  };
  const auto pieces = sum(on, [](const pb::ExecNode& n) { return n.stream() == plan::kCommTp; });
  EXPECT_EQ(pieces.second, 1024);
  const auto tp_on =
      sum(on, [](const pb::ExecNode& n) { return n.kind() == pb::NODE_KIND_COLLECTIVE; });
  const auto tp_off =
      sum(off, [](const pb::ExecNode& n) { return n.kind() == pb::NODE_KIND_COLLECTIVE; });
  EXPECT_NEAR(tp_on.first, tp_off.first, tp_off.first * 1e-12);
  const auto gemm_on =
      sum(on, [](const pb::ExecNode& n) { return n.op_class() == pb::OP_CLASS_GEMM; });
  const auto gemm_off =
      sum(off, [](const pb::ExecNode& n) { return n.op_class() == pb::OP_CLASS_GEMM; });
  EXPECT_NEAR(gemm_on.first, gemm_off.first, gemm_off.first * 1e-12);
  EXPECT_EQ(gemm_on.second - gemm_off.second, 32 * 2 * 4 * 3);  // each GEMM 4 pieces, not 1
}

// By hand: with a dp of 1 and one pipeline stage the step is M (F + B) plus the optimizer, so
// overlapping changes it by M x layers x, per overlapped pair, (n g - G) + (c + (n - 1)
// max(c, g) + g - n g) - C: the GEMM's n pieces of g instead of its G in one, plus what the
// pipeline of n pieces of c leaves exposed, instead of the blocking collective's C (no
// calibration: no blocking overhead, no skew, no overlap slowdown). Returns the change.
double check_by_hand(const Fixture& f, const pb::Plan& with, const pb::Plan& without) {
  const plan::ResolvedPlan on = f.resolve(with);
  const auto n = static_cast<double>(on.plan.tp_comm_overlap_chunks());
  const auto tables = plan::detail::make_op_tables(on);
  const pb::DeviceSpec& device = plan::device_of(on, 0);
  const std::vector<int64_t> tp = {0, 1, 2, 3, 4, 5, 6, 7};
  double per_layer = 0;
  for (const pb::Phase phase : {pb::PHASE_FORWARD, pb::PHASE_BACKWARD}) {
    for (const auto& s : plan::detail::layer_program(tables.dense_layer, on, phase)) {
      if (s.kind != plan::detail::Step::Kind::kOverlapped) continue;
      const auto w = plan::detail::op_work(*s.op, s.phase);
      const double whole =
          f.costs.compute().seconds(device, s.op->op_class, w.flops, w.bytes_read + w.bytes_written,
                                    s.op->shape, s.phase, s.op->name);
      const double g =
          f.costs.compute().seconds(device, s.op->op_class, w.flops / n,
                                    (w.bytes_read + w.bytes_written) / n, {}, s.phase, s.op->name);
      const double c = f.costs.collectives().estimate(s.collective, tp, s.bytes / n).seconds;
      const double blocking = f.costs.collectives().estimate(s.collective, tp, s.bytes).seconds;
      per_layer += (n * g - whole) + (c + (n - 1) * std::max(c, g) + g - n * g) - blocking;
    }
  }
  const double expected =
      static_cast<double>(on.num_micro_batches * on.model.num_layers()) * per_layer;
  const double delta = f.step(with, EngineKind::kAnalytic) - f.step(without, EngineKind::kAnalytic);
  EXPECT_NEAR(delta, expected, std::abs(expected) * 1e-9);
  return delta;
}

TEST(TpCommOverlap, AnalyticStepMatchesThePipelineByHand) {
  const Fixture f;
  // llama3-70b at seq 8192: GEMM pieces longer than the collective's pieces, so the overlap
  // hides all but one piece of each collective and the step shrinks.
  pb::Plan big_on = tp_plan(true, 4, 2, 8192), big_off = tp_plan(false, 0, 2, 8192);
  big_on.set_model("llama3-70b"), big_off.set_model("llama3-70b");
  EXPECT_LT(check_by_hand(f, big_on, big_off), 0);
  // llama3-8b at seq 4096 over tp 8: a quarter of a collective costs nearly a whole one's
  // latency and the GEMM pieces are short, so here overlapping in 4 pieces loses.
  EXPECT_GT(check_by_hand(f, tp_plan(true, 4), tp_plan(false)), 0);
}

TEST(TpCommOverlap, EnginesAgreeWithoutContention) {
  const Fixture f;
  for (const int64_t chunks : {0, 2}) {
    const auto plan = f.resolve(tp_plan(true, chunks));
    const pb::SimResult a = simulate(plan, f.costs, EngineKind::kAnalytic).result;
    const pb::SimResult d = simulate(plan, f.costs, EngineKind::kDes).result;
    EXPECT_NEAR(d.step_time_s(), a.step_time_s(), 0.02 * a.step_time_s()) << chunks;
    EXPECT_GT(exposed(a, "tp"), 0);
  }
}

// dp 8 on one node (tp 1): the gradient buckets carry every parameter once, in fp32 by default
// (the precision table's 4 bytes for bf16 training) and in half of that with bf16.
pb::Plan dp_plan(pb::GradReduceDtype dtype, pb::Sharding sharding = pb::SHARDING_NONE) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_sharding(sharding);
  p.set_grad_reduce_dtype(dtype);
  return p;
}

double dp_bucket_bytes(const plan::ResolvedPlan& plan) {
  plan::LowerOptions o;
  o.ranks = {0};
  double bytes = 0;
  const pb::ExecGraph g = plan::lower(plan, o);
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.name().find(".bucket") != std::string::npos ||
        n.name().find("fsdp.reduce_scatter") != std::string::npos)
      bytes += n.comm_bytes();
  }
  return bytes;
}

TEST(GradReduceDtype, Bf16HalvesTheReductionsBytes) {
  const Fixture f;
  const double params = 8030261248.0;  // llama3-8b (fsdp_buckets_test.cpp)
  for (const auto sharding : {pb::SHARDING_NONE, pb::SHARDING_ZERO1, pb::SHARDING_FSDP}) {
    EXPECT_DOUBLE_EQ(
        dp_bucket_bytes(f.resolve(dp_plan(pb::GRAD_REDUCE_DTYPE_UNSPECIFIED, sharding))),
        params * 4);
    EXPECT_DOUBLE_EQ(dp_bucket_bytes(f.resolve(dp_plan(pb::GRAD_REDUCE_DTYPE_FP32, sharding))),
                     params * 4);
    EXPECT_DOUBLE_EQ(dp_bucket_bytes(f.resolve(dp_plan(pb::GRAD_REDUCE_DTYPE_BF16, sharding))),
                     params * 2);
  }
}

// Without overlap and with one step of one micro-batch, the DP buckets run one after another
// after the backward: bf16 makes each bucket's all-reduce a collective of half the bytes, so the
// exposed dp time is the sum of those (the collective model's, by hand below) in both engines.
TEST(GradReduceDtype, EnginesPriceTheHalvedBucketsAlike) {
  const Fixture f;
  const auto plan = f.resolve(dp_plan(pb::GRAD_REDUCE_DTYPE_BF16));
  const pb::SimResult a = simulate(plan, f.costs, EngineKind::kAnalytic).result;
  const pb::SimResult d = simulate(plan, f.costs, EngineKind::kDes).result;
  EXPECT_NEAR(d.step_time_s(), a.step_time_s(), 0.02 * a.step_time_s());
  plan::LowerOptions o;
  o.ranks = {0};
  double by_hand = 0;
  const std::vector<int64_t> dp = {0, 1, 2, 3, 4, 5, 6, 7};
  const pb::ExecGraph g = plan::lower(plan, o);
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.name().find(".bucket") != std::string::npos)
      by_hand += f.costs.collectives().estimate(n.collective(), dp, n.comm_bytes()).seconds;
  }
  EXPECT_NEAR(exposed(a, "dp"), by_hand, by_hand * 1e-9);
  const pb::SimResult fp32 =
      simulate(f.resolve(dp_plan(pb::GRAD_REDUCE_DTYPE_FP32)), f.costs, EngineKind::kAnalytic)
          .result;
  EXPECT_LT(exposed(a, "dp"), 0.6 * exposed(fp32, "dp"));
}

// Ring attention over two nodes (tp 8 inside each, cp 2 across them): each KV exchange crosses
// InfiniBand beside one attention piece. With a short sequence the pieces are shorter than the
// exchanges, so the ring's communication is exposed (not hidden); both engines price it alike
// (each tp rank's ring goes through its own NIC: no contention).
TEST(CpRingOverlap, ExchangesLongerThanThePiecesAreExposedInBothEngines) {
  const Fixture f(2);
  pb::Plan p = tp_plan(false);
  p.mutable_job()->set_seq_len(1024);
  p.mutable_parallel()->set_cp(2);
  const auto plan = f.resolve(p);
  const pb::SimResult a = simulate(plan, f.costs, EngineKind::kAnalytic).result;
  const pb::SimResult d = simulate(plan, f.costs, EngineKind::kDes).result;
  EXPECT_GT(exposed(a, "cp"), 0);
  EXPECT_NEAR(exposed(d, "cp"), exposed(a, "cp"), 0.05 * exposed(a, "cp"));
  EXPECT_NEAR(d.step_time_s(), a.step_time_s(), 0.02 * a.step_time_s());
}

}  // namespace
}  // namespace orrery::sim

namespace orrery::sim {
namespace {

// Megatron's DP overlap under interleaving, on one DGX H100 (llama3-8b, pp 2 x vp 2 x dp 4, two
// micro-batches of 512 tokens, the distributed optimizer with both overlaps): each chunk's
// buckets go out when its last backward ends and chunk 1's gathers have until its first forward.
// The lowering always did this (and des ran it); the analytic engine now follows it
// (dp_tail.cpp's chunk_shares, spread_gathers) instead of hiding everything behind one
// micro-batch's backward and forward, and so comes within 1% (DDP) and 3.5% (ZeRO-1) of des.
TEST(DpOverlap, InterleavedChunksAgreeWithDes) {
  const Fixture f;
  for (const auto sharding : {pb::SHARDING_NONE, pb::SHARDING_ZERO1}) {
    pb::Plan p = tp_plan(false, 0, 8, 512);
    p.mutable_parallel()->set_tp(1);
    p.mutable_parallel()->set_sequence_parallel(false);
    p.mutable_parallel()->set_pp(2);
    p.mutable_parallel()->set_vp(2);
    p.mutable_parallel()->set_dp(4);
    p.set_sharding(sharding);
    p.set_overlap_grad_reduce(true);
    p.set_overlap_param_gather(sharding == pb::SHARDING_ZERO1);
    const auto plan = f.resolve(p);
    const pb::SimResult a = simulate(plan, f.costs, EngineKind::kAnalytic).result;
    const pb::SimResult d = simulate(plan, f.costs, EngineKind::kDes).result;
    EXPECT_GT(exposed(d, "dp"), 0);
    // Measured: DDP 0.1446 s against des 0.1457 s (the former rule: 0.152 s, +4.3%); ZeRO-1
    // 0.0958 s against 0.1001 s (+4.5%; 0.1005 against 0.1041 before rings on NVSwitch got 0.75 of
    // the link, 2026-11-28; former rule: +6.7%). des hides more of ZeRO-1's tail than the
    // analytic window (0.0206 s exposed against 0.0293 s), yet des's step is the longer one: where
    // des loses the difference is not attributed to dp in its breakdown (not investigated).
    const double tolerance = sharding == pb::SHARDING_NONE ? 0.02 : 0.05;
    EXPECT_NEAR(d.step_time_s(), a.step_time_s(), tolerance * a.step_time_s());
  }
}

}  // namespace
}  // namespace orrery::sim
