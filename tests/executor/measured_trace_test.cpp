// `orrery run --out DIR` writes a measured trace whose nodes are exactly the simulator's nodes
// for the same plan (same ids, names and kinds on every rank), each with a measured duration,
// plus a Perfetto timeline. Checked here independently of the executor's own check: the plan,
// model and cluster stored in the trace are lowered again and compared node by node.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor_test_util.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/traces/spec_io.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

using test::Ran;

Ran run_cli(const std::string& args) { return test::run_cli(ORRERY_RUN_CLI_BIN, args); }

// Runs `args` for two steps and checks the trace against a fresh lowering of its own plan; the
// measured graph goes to `out` when given.
void expect_trace_matches_lowering(const std::string& name, const std::string& args,
                                   pb::ExecGraph* out = nullptr) {
  const std::string dir = test::fresh_dir("trace-" + name);
  std::filesystem::remove_all(dir);  // `orrery run` creates it
  const Ran r = run_cli(args + " --cluster local --steps 2 --seed 5 --out " + dir);
  ASSERT_EQ(r.status, 0) << r.out;

  pb::ExecGraph measured;
  read_spec_file(dir + "/trace.json", &measured);
  EXPECT_EQ(measured.steps(), 1);  // step 1 is warm-up
  ASSERT_EQ(measured.step_seconds_size(), 2);
  EXPECT_GT(measured.measured_step_s(), 0);
  EXPECT_EQ(measured.device(), "local-cpu-core");

  const plan::ResolvedPlan plan =
      plan::resolve_plan(measured.plan(), measured.model_spec(), measured.cluster_spec());
  const pb::ExecGraph predicted = plan::lower(plan);
  ASSERT_EQ(measured.world_size(), predicted.world_size());
  ASSERT_EQ(measured.ranks_size(), predicted.ranks_size());
  for (int r = 0; r < predicted.ranks_size(); ++r) {
    const auto& want = predicted.ranks(r);
    const auto& got = measured.ranks(r);
    EXPECT_EQ(got.rank(), want.rank());
    ASSERT_EQ(got.nodes_size(), want.nodes_size()) << "rank " << r;
    double busy = 0, all = 0;
    std::vector<std::pair<double, double>> spans;  // (start, end) of every timed op
    for (int i = 0; i < want.nodes_size(); ++i) {
      const auto& w = want.nodes(i);
      const auto& g = got.nodes(i);
      EXPECT_EQ(g.id(), w.id());
      EXPECT_EQ(g.name(), w.name());
      EXPECT_EQ(g.kind(), w.kind()) << w.name();
      ASSERT_TRUE(g.has_duration_s() && g.has_start_s()) << w.name();
      EXPECT_GE(g.duration_s(), 0) << w.name();
      if (g.kind() == pb::NODE_KIND_COMPUTE) busy += g.duration_s();
      all += g.duration_s();
      spans.emplace_back(g.start_s(), g.start_s() + g.duration_s());
    }
    // This rank's own step: the time its timed ops cover plus the host time between them
    // (untimed_s). Not measured_step_s, which is rank 0's wall time: on two shared cores one rank
    // can start its step milliseconds before the other and spend them computing.
    std::sort(spans.begin(), spans.end());
    double covered = 0, reach = -1e300;
    for (const auto& [s, e] : spans) {
      if (e <= reach) continue;
      covered += e - std::max(s, reach);
      reach = e;
    }
    const double step = covered + got.untimed_s();
    // Compute runs on one thread per rank: its ops fit in the step they were timed in.
    EXPECT_LE(busy, step * 1.05) << "rank " << r;
    // ... and the timed ops (compute, collectives, waits for transfers) cover much of the step.
    // Not all: these steps take tens of milliseconds, and per-step work outside the graph (token
    // generation, zeroing gradients, the loss report) is a visible share of them.
    EXPECT_GT(all, step * 0.4) << "rank " << r << ", compute " << busy;
  }

  std::ifstream timeline(dir + "/timeline.json");
  ASSERT_TRUE(timeline.good());
  const auto events = nlohmann::json::parse(timeline).at("traceEvents");
  EXPECT_GT(events.size(), static_cast<size_t>(predicted.ranks(0).nodes_size()));
  EXPECT_FALSE(std::filesystem::exists(dir + "/trace.rank0.json"));
  std::filesystem::remove_all(dir);
  if (out != nullptr) *out = measured;
}

TEST(MeasuredTrace, DataParallel) {
  expect_trace_matches_lowering("dp2", "--model tiny --dp 2 --global-batch 4 --seq 32");
}

TEST(MeasuredTrace, DataParallelOverlappedWithBackward) {
  // overlap_grad_reduce: the same nodes (the lowering changes only their dependencies), and the
  // first buckets (the head's and the last layers' gradients) are launched while the rest of
  // backward still runs: they start before the last backward op ends.
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "dp2overlap",
      "--model tiny --dp 2 --global-batch 4 --seq 32 --bucket '64 KiB' --overlap-grad-reduce",
      &measured);
  ASSERT_EQ(measured.ranks_size(), 2);
  for (const auto& rank : measured.ranks()) {
    double backward_end = 0, bucket0_start = -1, last_bucket_start = -1;
    int buckets = 0;
    for (const auto& n : rank.nodes()) {
      if (n.kind() == pb::NODE_KIND_COMPUTE && n.phase() == pb::PHASE_BACKWARD) {
        backward_end = std::max(backward_end, n.start_s() + n.duration_s());
      }
      if (n.name() == "opt.dp.bucket0.all_reduce") bucket0_start = n.start_s();
      if (n.name().rfind("opt.dp.bucket", 0) == 0)
        ++buckets, last_bucket_start = std::max(last_bucket_start, n.start_s());
    }
    EXPECT_GE(buckets, 3) << "rank " << rank.rank();
    ASSERT_GE(bucket0_start, 0) << "rank " << rank.rank();
    EXPECT_LT(bucket0_start, backward_end) << "rank " << rank.rank();
    EXPECT_LE(bucket0_start, last_bucket_start) << "rank " << rank.rank();
  }
}

TEST(MeasuredTrace, Zero1WithBothOverlaps) {
  // ZeRO-1 with overlap_grad_reduce and overlap_param_gather: the lowering's nodes; the parameter
  // gathers are launched at the step's start (the head's before layer 0 computes) and the
  // reduce-scatters are timed with the algorithm that ran.
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "zero1overlap",
      "--model tiny --dp 2 --global-batch 4 --seq 32 --sharding zero1 --bucket '64 KiB' "
      "--overlap-grad-reduce --overlap-param-gather",
      &measured);
  ASSERT_EQ(measured.ranks_size(), 2);
  std::map<std::string, pb::ExecNode> nodes;
  for (const auto& n : measured.ranks(0).nodes()) nodes[n.name()] = n;
  ASSERT_TRUE(nodes.count("opt.head.param_all_gather") && nodes.count("L0.mb0.fwd.attn.qkv"));
  EXPECT_LT(nodes.at("opt.head.param_all_gather").start_s(),
            nodes.at("L0.mb0.fwd.attn.qkv").start_s());
  EXPECT_EQ(nodes.at("opt.dp.bucket0.reduce_scatter").algorithm(), "alltoall+sum");
}

TEST(MeasuredTrace, FsdpTimesItsCopiesAndLeavesReduceScattersInFlight) {
  // FSDP: the lowering's nodes, with a copy-out after every gather and a copy-in before every
  // reduce-scatter, each timed as its own node (not folded into a neighbouring op's backward or
  // left untimed); and the reduce-scatters are left in flight while the backward goes on (FSDP2,
  // and the lowering, which puts them on their own stream): with the next bucket's gather
  // prefetched, some compute op runs from start to end while a reduce-scatter is in flight, which
  // a blocking reduce-scatter on the rank's one compute thread would rule out.
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "fsdp", "--model tiny --dp 2 --global-batch 8 --seq 32 --sharding fsdp --prefetch 1",
      &measured);
  ASSERT_EQ(measured.ranks_size(), 2);
  for (const auto& rank : measured.ranks()) {
    SCOPED_TRACE("rank " + std::to_string(rank.rank()));
    std::map<std::string, pb::ExecNode> nodes;
    for (const auto& n : rank.nodes()) nodes[n.name()] = n;
    auto with = [](std::string name, const std::string& from, const std::string& to) {
      return name.replace(name.find(from), from.size(), to);
    };
    int gathers = 0, reductions = 0, ran_beside = 0;
    for (const auto& [name, n] : nodes) {
      if (name.find("fsdp.all_gather") != std::string::npos) {
        ++gathers;
        const std::string copy = with(name, "all_gather", "copy_out");
        ASSERT_TRUE(nodes.count(copy)) << copy;
        EXPECT_GE(nodes.at(copy).start_s(), n.start_s()) << copy;
      }
      if (name.find("fsdp.reduce_scatter") == std::string::npos) continue;
      ++reductions;
      const std::string copy = with(name, "reduce_scatter", "copy_in");
      ASSERT_TRUE(nodes.count(copy)) << copy;
      const pb::ExecNode& in = nodes.at(copy);
      EXPECT_EQ(in.kind(), pb::NODE_KIND_COMPUTE);
      EXPECT_LE(in.start_s() + in.duration_s(), n.start_s() + 1e-6) << name;
      for (const auto& c : rank.nodes()) {
        if (c.kind() == pb::NODE_KIND_COMPUTE && c.start_s() > n.start_s() &&
            c.start_s() + c.duration_s() < n.start_s() + n.duration_s()) {
          ++ran_beside;
        }
      }
    }
    // tiny: embedding, 2 layers, head, one unit per bucket; 4 micro-batches per rank.
    EXPECT_EQ(gathers, 4 * 8);
    EXPECT_EQ(reductions, 4 * 4);
    EXPECT_GT(ran_beside, 0);
  }
}

TEST(MeasuredTrace, Bf16RecordsTheTypeEachOpRanIn) {
  // Under bf16 autocast the GEMMs run in bf16 and the norms in fp32 (the residual stream is
  // fp32); calibration divides each by the matching peak. The gradient reductions (fp32) carry no
  // dtype; the collectives that carry bf16 say so (mixed_precision_parallel_test.cpp).
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "bf16", "--model tiny --dp 2 --global-batch 4 --seq 32 --precision bf16", &measured);
  ASSERT_EQ(measured.ranks_size(), 2);
  std::map<std::string, std::string> dtype;
  for (const auto& n : measured.ranks(1).nodes()) dtype[n.name()] = n.dtype();
  EXPECT_EQ(dtype.at("L0.mb0.fwd.mlp.up"), "bf16");
  EXPECT_EQ(dtype.at("L1.mb1.bwd.attn.qkv"), "bf16");
  EXPECT_EQ(dtype.at("L0.mb0.fwd.mlp.norm"), "fp32");
  EXPECT_EQ(dtype.at("mb0.fwd.head.loss"), "fp32");
  EXPECT_EQ(dtype.at("opt.dp.bucket0.all_reduce"), "");
}

TEST(MeasuredTrace, Fp16KeepsTheLoweringsNodesAndRecordsFp32GemmsOnTheCpu) {
  // fp16's unscaling and inf/nan check are timed inside the optimizer node (the lowering has no
  // node of its own for them); on a CPU the GEMMs run in fp32, and the trace says so.
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "fp16", "--model tiny --tp 2 --pp 2 --dp 1 --global-batch 4 --seq 32 --precision fp16",
      &measured);
  ASSERT_EQ(measured.ranks_size(), 4);
  std::map<std::string, std::string> dtype;
  for (const auto& n : measured.ranks(0).nodes()) dtype[n.name()] = n.dtype();
  EXPECT_EQ(dtype.at("L0.mb0.fwd.mlp.up"), "fp32");
  EXPECT_EQ(dtype.count("opt.adamw"), 1U);
}

TEST(MeasuredTrace, TensorParallel) {
  expect_trace_matches_lowering("tp2", "--model tiny --tp 2 --dp 1 --global-batch 2 --seq 32");
}

TEST(MeasuredTrace, TensorParallelWithSequenceParallelGptStyle) {
  expect_trace_matches_lowering("tp2sp",
                                "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                                    "/tiny-gpt.yaml --tp 2 --sp --dp 1 --global-batch 2 --seq 32");
}

TEST(MeasuredTrace, PipelineOneFOneB) {
  expect_trace_matches_lowering(
      "pp2", "--model tiny --pp 2 --dp 1 --global-batch 4 --seq 16 --schedule one_f_one_b");
}

TEST(MeasuredTrace, PipelineGpipeTiedEmbeddings) {
  expect_trace_matches_lowering(
      "pp2gpipe", "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                      "/tiny-gpt.yaml --pp 2 --dp 1 --global-batch 4 --seq 16 --schedule gpipe");
}

TEST(MeasuredTrace, PipelineInterleavedVirtualStages) {
  // pp 2 x vp 2: each rank runs its two chunks in the lowering's order, under its names.
  expect_trace_matches_lowering("pp2vp2", "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                                              "/tiny-4layer.yaml --pp 2 --vp 2 --dp 1 "
                                              "--global-batch 4 --seq 16");
}

TEST(MeasuredTrace, MaterializedAttentionOneRank) {
  expect_trace_matches_lowering(
      "mat", "--model tiny --dp 1 --global-batch 2 --seq 32 --attention materialized");
}

// Recomputation re-runs ops and collectives inside the backward pass under the lowering's "rcp"
// names: full recomputation every layer op and its TP collectives, selective the attention core.
TEST(MeasuredTrace, FullRecomputationUnderTensorParallelism) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "rcp-full", "--model tiny --tp 2 --dp 1 --global-batch 2 --seq 32 --recompute full",
      &measured);
  bool rcp_gemm = false, rcp_collective = false;
  for (const auto& n : measured.ranks(0).nodes()) {
    rcp_gemm = rcp_gemm || n.name() == "L1.mb0.rcp.attn.qkv";
    rcp_collective = rcp_collective || n.name() == "L1.mb0.rcp.attn.out.all_reduce";
  }
  EXPECT_TRUE(rcp_gemm && rcp_collective);
}

TEST(MeasuredTrace, SelectiveRecomputationMaterializedAttention) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering("rcp-sel",
                                "--model tiny --dp 1 --global-batch 2 --seq 32 --attention "
                                "materialized --recompute selective",
                                &measured);
  int rcp = 0;
  for (const auto& n : measured.ranks(0).nodes())
    rcp += n.name().find(".rcp.") != std::string::npos ? 1 : 0;
  // Scores, softmax and context of tiny's two layers in each of the two micro-batches.
  EXPECT_EQ(rcp, 3 * 2 * 2);
}

// Op-level checkpointing re-runs what it did not keep, under the lowering's "rcp" names: in each
// of tiny's layers norms, RoPE, activation, residual adds, attn.out and the not-kept piece of
// attn.qkv (k) and mlp.up (up); the attention kernel and mlp.down are kept, so never re-run.
TEST(MeasuredTrace, OpLevelCheckpointing) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "rcp-op", "--model tiny --dp 1 --global-batch 2 --seq 32 --recompute selective_op",
      &measured);
  std::set<std::string> rcp;
  for (const auto& n : measured.ranks(0).nodes()) {
    if (n.name().rfind("L1.mb1.rcp.", 0) == 0) rcp.insert(n.name().substr(11));
  }
  EXPECT_EQ(
      rcp, (std::set<std::string>{"attn.norm", "attn.qkv", "attn.rope", "attn.out", "attn.residual",
                                  "mlp.norm", "mlp.up", "mlp.act", "mlp.residual"}));
}

// Under TP with SP the layer's collectives are kept, not re-run: no "rcp" collective, as in the
// lowering.
TEST(MeasuredTrace, OpLevelCheckpointingUnderSequenceParallelism) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering("rcp-op-tp2sp",
                                "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                                    "/tiny-gpt.yaml --tp 2 --sp --dp 1 --global-batch 2 --seq 32 "
                                    "--recompute selective_op",
                                &measured);
  int rcp_gemm = 0;
  for (const auto& n : measured.ranks(1).nodes()) {
    EXPECT_FALSE(n.name().find(".rcp.") != std::string::npos && n.kind() != pb::NODE_KIND_COMPUTE)
        << n.name();
    rcp_gemm += n.name() == "L0.mb0.rcp.attn.qkv" ? 1 : 0;
  }
  EXPECT_EQ(rcp_gemm, 1);
}

// Ring attention (ring_attention.hpp): each layer's attention core as cp kernels with cp - 1
// sends and receives of the KV block, forward and backward, as the lowering has them; gradients
// reduced over the dp x cp ranks.
TEST(MeasuredTrace, ContextParallelRingAttention) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering("cp2-dp2", "--model tiny --cp 2 --dp 2 --global-batch 4 --seq 32",
                                &measured);
  std::vector<std::string> ring;
  for (const auto& n : measured.ranks(1).nodes()) {
    if (n.name().rfind("L0.mb0.", 0) == 0 && n.name().find(".ring") != std::string::npos)
      ring.push_back(n.name().substr(7));
  }
  std::sort(ring.begin(), ring.end());
  EXPECT_EQ(ring, (std::vector<std::string>{"bwd.attn.core.ring0", "bwd.attn.core.ring0.recv",
                                            "bwd.attn.core.ring0.send", "bwd.attn.core.ring1",
                                            "fwd.attn.core.ring0", "fwd.attn.core.ring0.recv",
                                            "fwd.attn.core.ring0.send", "fwd.attn.core.ring1"}));
}

TEST(MeasuredTrace, ContextParallelWithSequenceParallelismAndRecomputation) {
  expect_trace_matches_lowering("cp2-tp2sp-full",
                                "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                                    "/tiny-gpt.yaml --cp 2 --tp 2 --sp --dp 1 --global-batch 2 "
                                    "--seq 32 --recompute full --sharding zero1");
}

// HSDP with CP: FSDP's collectives over 2 dp ranks x their CP ranks, the replica all-reduce over
// the other shard group's rank at the same place.
TEST(MeasuredTrace, ContextParallelUnderHsdp) {
  expect_trace_matches_lowering(
      "cp2-hsdp",
      "--model tiny --cp 2 --dp 4 --sharding hsdp --shard-group 2 --global-batch 4 --seq 32");
}

// Under op-level checkpointing the ring runs in the layer's first forward only: no `rcp` ring
// node, the backward ring as usual.
TEST(MeasuredTrace, ContextParallelUnderOpLevelCheckpointing) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering(
      "cp2-sop", "--model tiny --cp 2 --dp 1 --global-batch 2 --seq 32 --recompute selective_op",
      &measured);
  int ring = 0;
  for (const auto& n : measured.ranks(0).nodes()) {
    EXPECT_FALSE(n.name().find(".rcp.attn.core") != std::string::npos) << n.name();
    ring += n.name() == "L0.mb0.bwd.attn.core.ring1" ? 1 : 0;
  }
  EXPECT_EQ(ring, 1);
}

// recompute_modules layernorm: each block norm re-run (`rcp`) before its block's backward.
TEST(MeasuredTrace, DiscardedNormsUnderSequenceParallelism) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering("ln-tp2sp",
                                "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                                    "/tiny-gpt.yaml --tp 2 --sp --dp 1 --global-batch 2 --seq 32 "
                                    "--recompute selective --recompute-modules layernorm,core_attn",
                                &measured);
  std::vector<std::string> rcp;
  for (const auto& n : measured.ranks(0).nodes()) {
    if (n.name().rfind("L1.mb0.rcp.", 0) == 0) rcp.push_back(n.name().substr(11));
  }
  std::sort(rcp.begin(), rcp.end());
  EXPECT_EQ(rcp, (std::vector<std::string>{"attn.core", "attn.norm", "mlp.norm"}));
}

// recompute_modules moe_act with one kernel per expert: each expert's activation re-run.
TEST(MeasuredTrace, DiscardedExpertActivationsPerExpert) {
  pb::ExecGraph measured;
  expect_trace_matches_lowering("moe-act",
                                "--model " + std::string(ORRERY_EXECUTOR_TEST_DIR) +
                                    "/tiny-moe.yaml --ep 2 --dp 2 --global-batch 4 --seq 32 "
                                    "--moe-expert-gemm per_expert --recompute selective "
                                    "--recompute-modules moe_act",
                                &measured);
  int rcp = 0;
  for (const auto& n : measured.ranks(0).nodes())
    rcp += n.name().rfind("L1.mb0.rcp.moe.experts.act", 0) == 0 ? 1 : 0;
  EXPECT_EQ(rcp, 2);  // the rank's two experts
}

TEST(MeasuredTrace, RefusesANonEmptyOutputDirectory) {
  const std::string dir = test::fresh_dir("trace-nonempty");
  std::ofstream(dir + "/notes.txt") << "mine\n";
  const Ran r = run_cli(
      "--model tiny --cluster local --dp 1 --global-batch 2 --seq 16 --steps 1 --out " + dir);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("exists and is not empty"), std::string::npos) << r.out;
  std::ifstream kept(dir + "/notes.txt");
  std::string line;
  std::getline(kept, line);
  EXPECT_EQ(line, "mine");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::executor
