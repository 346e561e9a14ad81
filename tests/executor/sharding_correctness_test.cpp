// Data parallelism with ZeRO-1/2 and FSDP (ZeRO-3) in the executor, and DDP's gradient buckets:
//   - the collectives follow the simulator's rule: the same buckets (names, parts, parameters) as
//     the lowering's nodes for the same plan, and hand-counted bucket layouts for the tiny model;
//   - real ranks (processes) over Gloo train to the same losses and parameters as one process
//     with the same model and seed (3 AdamW steps; the differences are fp32 summation orders);
//   - `orrery run` with --out times every collective under the lowering's node names (the
//     executor fails the run when its ops and the predicted graph's differ).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor_test_util.hpp"
#include "orrery/executor/data_parallel.hpp"
#include "orrery/executor/results.hpp"
#include "orrery/executor/train_config.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 3;
constexpr double kLossTolerance = 1e-5;   // absolute, on losses ~5.5
constexpr double kParamTolerance = 1e-4;  // absolute, on parameters ~0.02..1

std::string gpt() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-gpt.yaml"; }

// ---- Layout: the executor's data-parallel collectives against the lowering's ----

struct Layout {
  std::string model = "tiny";
  int64_t tp = 1, dp = 2, pp = 1;
  pb::Sharding sharding = pb::SHARDING_NONE;
  double bucket_bytes = 0;
  int64_t ep = 1;
};

TrainConfig config(const Layout& l) {
  TrainConfig c;
  c.model = models::load_model(l.model);
  c.plan.set_model(c.model.name());
  c.plan.mutable_job()->set_global_batch_size(4 * l.dp);
  c.plan.mutable_job()->set_seq_len(32);
  c.plan.mutable_job()->set_precision(pb::PRECISION_FP32);
  c.plan.mutable_parallel()->set_tp(l.tp);
  c.plan.mutable_parallel()->set_dp(l.dp);
  c.plan.mutable_parallel()->set_pp(l.pp);
  c.plan.mutable_parallel()->set_ep(l.ep);
  c.plan.set_micro_batch_size(1);
  c.plan.set_sharding(l.sharding);
  c.plan.set_bucket_bytes(l.bucket_bytes);
  return c;
}

std::vector<std::string> names(const std::vector<DataParallelCollective>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.name);
  return out;
}

TEST(DataParallelLayout, GradientBucketsFollowTheRule) {
  // tiny at tp 1, per part: embed 256 x 64 = 16,384; a layer: 2 norms 64 each + q 64 x 64 = 4,096
  // + k, v 32 x 64 = 2,048 each + out 4,096 + gate, up, down 128 x 64 = 8,192 each = 36,992; head:
  // norm 64 + LM head 16,384 = 16,448. Backward order: head, L1, L0, embed.
  Layout l;
  l.bucket_bytes = 65536;  // 16,384 fp32 gradients: every part fills a bucket on its own
  auto got = data_parallel_collectives(config(l), 0);
  ASSERT_EQ(got.size(), 4u);
  const std::vector<std::string> parts = {"head", "L1", "L0", "embed"};
  const std::vector<int64_t> params = {16448, 36992, 36992, 16384};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].name, "opt.dp.bucket" + std::to_string(i) + ".all_reduce");
    EXPECT_EQ(got[i].parts, std::vector<std::string>{parts[i]});
    EXPECT_EQ(got[i].params, params[i]);
  }
  // 200,000 bytes = 50,000 parameters: {head, L1} = 53,440, then {L0, embed} = 53,376. A part is
  // never split, and a bucket closes once it reaches the limit.
  l.bucket_bytes = 200000;
  got = data_parallel_collectives(config(l), 1);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].parts, (std::vector<std::string>{"head", "L1"}));
  EXPECT_EQ(got[0].params, 53440);
  EXPECT_EQ(got[1].parts, (std::vector<std::string>{"L0", "embed"}));
  EXPECT_EQ(got[1].params, 53376);
  // bucket_bytes 0: Megatron's max(40M, 1M x dp) parameters, one bucket for the whole model.
  l.bucket_bytes = 0;
  got = data_parallel_collectives(config(l), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].params, 106816);
  // ZeRO-1/2: the same buckets reduce-scattered, then one gather per part in forward order.
  l.sharding = pb::SHARDING_ZERO2;
  l.bucket_bytes = 200000;
  EXPECT_EQ(
      names(data_parallel_collectives(config(l), 0)),
      (std::vector<std::string>{"opt.dp.bucket0.reduce_scatter", "opt.dp.bucket1.reduce_scatter",
                                "opt.embed.param_all_gather", "opt.L0.param_all_gather",
                                "opt.L1.param_all_gather", "opt.head.param_all_gather"}));
  // FSDP: parts in forward order, a bucket closed at 50,000 parameters: {embed, L0}, {L1, head}.
  l.sharding = pb::SHARDING_FSDP;
  got = data_parallel_collectives(config(l), 0);
  EXPECT_EQ(names(got), (std::vector<std::string>{"mb0.fwd.embed.fsdp.all_gather",
                                                  "L1.mb0.fwd.fsdp.all_gather"}));
  EXPECT_EQ(got[0].params, 16384 + 36992);
  // No DP group: nothing to reduce.
  l.dp = 1;
  EXPECT_TRUE(data_parallel_collectives(config(l), 0).empty());
}

// The lowering's data-parallel collectives of `rank`: buckets and parameter gathers, or FSDP's
// forward gathers of micro-batch 0, with their parameters (fp32: comm_bytes / 4).
std::vector<DataParallelCollective> lowered(const TrainConfig& c, int64_t rank) {
  auto cluster = topologies::load_cluster("dgx-h100", 1);
  const int64_t world = c.plan.parallel().tp() * c.plan.parallel().dp() * c.plan.parallel().pp();
  cluster.mutable_node_types(0)->set_devices_per_node(world);
  plan::LowerOptions o;
  o.ranks = {rank};
  const auto g = plan::lower(plan::resolve_plan(c.plan, c.model, cluster), o);
  std::vector<DataParallelCollective> out;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.kind() != pb::NODE_KIND_COLLECTIVE) continue;
    const bool fsdp_gather = n.name().find("fsdp.all_gather") != std::string::npos &&
                             n.micro_batch() == 0 && n.phase() == pb::PHASE_FORWARD;
    const bool optimizer = n.name().rfind("opt.dp.", 0) == 0 ||
                           n.name().rfind("opt.edp.", 0) == 0 ||
                           n.name().rfind("opt.hsdp.", 0) == 0 ||
                           n.name().find("param_all_gather") != std::string::npos;
    if (!fsdp_gather && !optimizer) continue;
    out.push_back({n.name(), {}, static_cast<int64_t>(std::llround(n.comm_bytes() / 4))});
  }
  return out;
}

TEST(DataParallelLayout, SameCollectivesAsTheLowering) {
  int compared = 0;
  for (const std::string& model : {std::string("tiny"), gpt()}) {
    for (const auto sharding :
         {pb::SHARDING_NONE, pb::SHARDING_ZERO1, pb::SHARDING_ZERO2, pb::SHARDING_FSDP}) {
      for (const double bucket : {0.0, 65536.0, 200000.0}) {
        for (const auto& [tp, pp] :
             std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {1, 2}}) {
          Layout l{model, tp, 2, pp, sharding, bucket};
          const auto c = config(l);
          if (!unsupported_reason(c).empty()) continue;  // fsdp with pp 2 and tied embeddings
          for (int64_t rank = 0; rank < tp * 2 * pp; ++rank) {
            SCOPED_TRACE(c.model.name() + " " + pb::Sharding_Name(sharding) + " bucket " +
                         std::to_string(bucket) + " tp " + std::to_string(tp) + " pp " +
                         std::to_string(pp) + " rank " + std::to_string(rank));
            const auto mine = data_parallel_collectives(c, rank);
            const auto theirs = lowered(c, rank);
            ASSERT_EQ(names(mine), names(theirs));
            for (size_t i = 0; i < mine.size(); ++i)
              EXPECT_EQ(mine[i].params, theirs[i].params) << mine[i].name;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(DataParallelLayout, HsdpCollectivesAsTheLowering) {
  // dp 4 in shard groups of 2: FSDP's gathers over the shard group, then the replica all-reduce of
  // the chunks (half the rank's parameters) over the two ranks holding the same chunks.
  int compared = 0;
  for (const std::string& model : {std::string("tiny"), gpt()}) {
    for (const double bucket : {0.0, 200000.0}) {
      for (const int64_t tp : {1, 2}) {
        Layout l{model, tp, 4, 1, pb::SHARDING_HSDP, bucket};
        auto c = config(l);
        c.plan.set_shard_group_size(2);
        ASSERT_EQ(unsupported_reason(c), "");
        for (int64_t rank = 0; rank < tp * 4; ++rank) {
          SCOPED_TRACE(c.model.name() + " bucket " + std::to_string(bucket) + " tp " +
                       std::to_string(tp) + " rank " + std::to_string(rank));
          const auto mine = data_parallel_collectives(c, rank);
          const auto theirs = lowered(c, rank);
          ASSERT_EQ(names(mine), names(theirs));
          ASSERT_FALSE(mine.empty());
          EXPECT_EQ(mine.back().name, "opt.hsdp.replica_all_reduce");
          for (size_t i = 0; i < mine.size(); ++i)
            EXPECT_EQ(mine[i].params, theirs[i].params) << mine[i].name;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 2 * 2 * (4 + 8));
}

TEST(DataParallelLayout, ExpertBucketsAsTheLowering) {
  // tiny-moe: routed experts in buckets of their own over the expert-data-parallel group
  // ("opt.edp.bucket<i>"), and their parameter gathers after the dense ones of each layer.
  const std::string moe = std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml";
  for (const auto sharding : {pb::SHARDING_NONE, pb::SHARDING_ZERO1}) {
    for (const auto& [dp, ep] : std::vector<std::pair<int64_t, int64_t>>{{2, 1}, {4, 2}, {2, 2}}) {
      Layout l{moe, 1, dp, 1, sharding, 65536, ep};
      const auto c = config(l);
      ASSERT_EQ(unsupported_reason(c), "");
      for (int64_t rank = 0; rank < dp; ++rank) {
        SCOPED_TRACE(pb::Sharding_Name(sharding) + " dp " + std::to_string(dp) + " ep " +
                     std::to_string(ep) + " rank " + std::to_string(rank));
        const auto mine = data_parallel_collectives(c, rank);
        const auto theirs = lowered(c, rank);
        ASSERT_EQ(names(mine), names(theirs));
        for (size_t i = 0; i < mine.size(); ++i)
          EXPECT_EQ(mine[i].params, theirs[i].params) << mine[i].name;
        const bool edp = std::any_of(mine.begin(), mine.end(), [](const auto& x) {
          return x.name.rfind("opt.edp.", 0) == 0;
        });
        EXPECT_EQ(edp, dp / ep > 1);  // no expert-data-parallel group when ep = dp
      }
    }
  }
}

TEST(DataParallelLayout, UnsupportedShardingIsRejectedWithAReason) {
  Layout l;
  l.sharding = pb::SHARDING_HSDP;
  // No shard group: the plan's rule (shard_group_size dividing dp), as `simulate` words it.
  EXPECT_NE(unsupported_reason(config(l)).find("shard_group_size"), std::string::npos);
  auto c = config(l);
  c.plan.set_shard_group_size(1);
  EXPECT_NE(unsupported_reason(c).find("shard_group_size 1"), std::string::npos);
  c.plan.set_shard_group_size(2);
  EXPECT_EQ(unsupported_reason(c), "");
  l = {gpt(), 1, 2, 2, pb::SHARDING_FSDP, 0};
  EXPECT_NE(unsupported_reason(config(l)).find("tied embeddings"), std::string::npos);
  for (const auto s : {pb::SHARDING_ZERO1, pb::SHARDING_ZERO2, pb::SHARDING_ZERO3}) {
    l = {gpt(), 2, 2, 1, s, 0};
    EXPECT_EQ(unsupported_reason(config(l)), "") << pb::Sharding_Name(s);
  }
}

// ---- Training: sharded plans against one process ----

using test::Outcome;
using test::Plan;

Outcome train(const std::string& model, const Plan& plan) {
  return test::train("shard-", model, plan, kSteps);
}

// The one-process run of `model`, trained once per test program.
const Outcome& reference(const std::string& model) {
  return test::one_process("shard-", model, kSteps);
}

void expect_matches(const Outcome& ref, const Outcome& got) {
  test::expect_matches(ref, got, kLossTolerance, kParamTolerance);
}

class ShardingMatchesSingleProcess : public ::testing::TestWithParam<std::string> {
 protected:
  std::string model() const { return GetParam() == "gpt" ? gpt() : "tiny"; }
};

TEST_P(ShardingMatchesSingleProcess, Zero1Dp2) {
  // 64 KiB buckets: four reduce-scatters; each part's chunks padded to a multiple of 2.
  const Outcome& ref = reference(model());
  EXPECT_LT(ref.steps.back().loss, ref.steps.front().loss);  // it learns
  expect_matches(
      ref, train(model(), {"zero1", 1, 2, 1, {"--sharding", "zero1", "--bucket-bytes", "65536"}}));
}

TEST_P(ShardingMatchesSingleProcess, Zero2Dp2) {
  expect_matches(reference(model()), train(model(), {"zero2", 1, 2, 1, {"--sharding", "zero2"}}));
}

TEST_P(ShardingMatchesSingleProcess, FsdpDp2PerPart) {
  // One bucket per part, each gathered before its forward and its backward, reduce-scattered
  // after its backward in each of the 2 micro-batches; the next bucket prefetched.
  expect_matches(reference(model()),
                 train(model(), {"fsdp", 1, 2, 1, {"--sharding", "fsdp", "--prefetch", "1"}}));
}

TEST_P(ShardingMatchesSingleProcess, Zero3Dp2Bucketed) {
  // 200,000-byte buckets: two parts each (with the GPT-style model the tied embedding's bucket
  // stays gathered until its backward).
  expect_matches(
      reference(model()),
      train(model(), {"zero3", 1, 2, 1, {"--sharding", "zero3", "--bucket-bytes", "200000"}}));
}

TEST_P(ShardingMatchesSingleProcess, HsdpDp4ShardGroup2) {
  // Two shard groups of two ranks: each bucket's chunks are halves, gathered and reduce-scattered
  // within the shard group, then all-reduced across the two replicas; 200,000-byte buckets.
  expect_matches(reference(model()),
                 train(model(), {"hsdp",
                                 1,
                                 4,
                                 1,
                                 {"--sharding", "hsdp", "--shard-group", "2", "--prefetch", "1",
                                  "--bucket-bytes", "200000"}}));
}

TEST_P(ShardingMatchesSingleProcess, FsdpDp2RecomputeFull) {
  // Each layer's bucket is gathered again for its recomputation (not for its backward), which
  // reads this micro-batch's gathered copies; its gradients still reach the reduce-scatter.
  expect_matches(
      reference(model()),
      train(
          model(),
          {"fsdp-rcp", 1, 2, 1, {"--sharding", "fsdp", "--prefetch", "1", "--recompute", "full"}}));
}

// One bucket for the whole model (the planner's 200 MiB on a small model): gathered for the
// head's backward, the recomputed layers re-run inside it from this micro-batch's copies, which
// the region keeps as its inputs (the model's tensors by then are the next micro-batch's, or
// freed: this crashed before). The same under op-level checkpointing.
TEST_P(ShardingMatchesSingleProcess, FsdpDp2OneBucketRecompute) {
  for (const char* recompute : {"full", "selective_op"}) {
    expect_matches(reference(model()), train(model(), {std::string("fsdp-1bucket-") + recompute,
                                                       1,
                                                       2,
                                                       1,
                                                       {"--sharding", "fsdp", "--bucket-bytes",
                                                        "209715200", "--recompute", recompute}}));
  }
}

TEST_P(ShardingMatchesSingleProcess, HsdpDp4BucketedRecomputeFull) {
  // Buckets {embed, L0} and {L1, head}: the first is gathered for L0's recomputation (the
  // embedding's backward uses that gather too), the second for the head's backward, before L1's
  // recomputation inside it.
  expect_matches(reference(model()),
                 train(model(), {"hsdp-rcp",
                                 1,
                                 4,
                                 1,
                                 {"--sharding", "hsdp", "--shard-group", "2", "--bucket-bytes",
                                  "200000", "--recompute", "full"}}));
}

INSTANTIATE_TEST_SUITE_P(Models, ShardingMatchesSingleProcess, ::testing::Values("llama", "gpt"));

// Sharding combined with tensor and pipeline parallelism (4 ranks).
TEST(ShardingWithModelParallelism, FsdpTp2Dp2SequenceParallel) {
  // The chunks hold TP shards; SP norm gradients are summed over TP on the chunks.
  expect_matches(reference("tiny"),
                 train("tiny", {"fsdp-tp2-dp2", 2, 2, 1, {"--sharding", "fsdp", "--sp"}}));
}

TEST(ShardingWithExperts, Zero1Ep2Dp4) {
  // Routed experts: 2 of the 4 on each EP rank, reduce-scattered and gathered over the
  // expert-data-parallel group (2 ranks), averaged over dp; the dense weights over dp (4 ranks).
  const std::string moe = std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml";
  expect_matches(reference(moe),
                 train(moe, {"zero1-ep2-dp4",
                             1,
                             4,
                             1,
                             {"--ep", "2", "--sharding", "zero1", "--bucket-bytes", "65536"}}));
}

TEST(ShardingWithExperts, Zero2Dp2WithoutEp) {
  // ep 1: the experts are replicated and reduce over the dp ranks, in their own buckets.
  const std::string moe = std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml";
  expect_matches(reference(moe), train(moe, {"zero2-moe-dp2", 1, 2, 1, {"--sharding", "zero2"}}));
}

TEST(ShardingWithModelParallelism, Zero1Dp2Pp2TiedEmbeddings) {
  // Each stage shards its own parts; the last stage's copy of the tied embedding (in no part, as
  // the lowering counts the matrix on the first stage) is averaged over dp after the two stages
  // summed its gradient, and updated whole.
  expect_matches(
      reference(gpt()),
      train(gpt(), {"zero1-dp2-pp2", 1, 2, 2, {"--sharding", "zero1", "--bucket-bytes", "65536"}}));
}

// ---- grad_reduce_dtype bf16: gradients reduced as bf16 copies, summed in fp32 ----

// Each rank's gradient is rounded to bf16 once before the reduction (relative error <= 2^-9, bf16
// keeps 8 significant bits) and, in an all-reduce, the fp32 sum once more before its all-gather:
// every reduced gradient, and so the norm, is within 2^-8 relative of the fp32 reduction's. The
// first step's loss comes before any update (the same as fp32 to kLossTolerance). A parameter can
// move further: AdamW's step is about lr (1e-3) whatever the gradient's size, and a gradient whose
// ranks' parts nearly cancel can change sign under the rounding, so a parameter is bounded only by
// 2 lr per step. Measured (tiny, 3 steps, Debian libtorch 1.13 CPU): gradient norms within 1.6e-4
// relative, losses within 5.8e-5, parameters within 2.6e-3 (embed.tokens.weight).
constexpr double kBf16GradNormTolerance = 1.0 / 256;
constexpr double kBf16LossTolerance = 5e-4;  // about 10x the measured differences
constexpr double kBf16ParamTolerance = 2 * 1e-3 * kSteps;

class GradReduceBf16 : public ::testing::TestWithParam<Plan> {};

TEST_P(GradReduceBf16, MatchesFp32WithinBf16Rounding) {
  Plan plan = GetParam();
  plan.extra.insert(plan.extra.end(), {"--grad-reduce-dtype", "bf16"});
  const Outcome& ref = reference("tiny");
  const Outcome got = train("tiny", plan);
  ASSERT_FALSE(got.steps.empty());
  EXPECT_NEAR(got.steps[0].loss, ref.steps[0].loss, kLossTolerance);
  test::expect_matches(ref, got, kBf16LossTolerance, kBf16ParamTolerance, kBf16GradNormTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shardings, GradReduceBf16,
    ::testing::Values(Plan{"bf16-none", 1, 2, 1, {"--bucket-bytes", "65536"}},
                      Plan{"bf16-zero1", 1, 2, 1, {"--sharding", "zero1"}},
                      Plan{"bf16-fsdp", 1, 2, 1, {"--sharding", "fsdp"}},
                      Plan{"bf16-hsdp", 1, 4, 1, {"--sharding", "hsdp", "--shard-group", "2"}}),
    [](const auto& info) { return info.param.name.substr(5); });

// ---- `orrery run` times every data-parallel collective under the lowering's names ----

using test::Ran;

Ran run_cli(const std::string& args) { return test::run_cli(ORRERY_RUN_CLI_BIN, args); }

// Rank 0's nodes of a merged trace.json, by name.
std::map<std::string, nlohmann::json> rank0_nodes(const std::string& path) {
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);
  std::map<std::string, nlohmann::json> out;
  for (const auto& n : trace.at("ranks").at(0).at("nodes"))
    out[n.at("name").get<std::string>()] = n;
  return out;
}

TEST(ShardingTrace, EveryCollectiveIsTimedUnderItsNodeName) {
  // The executor checks that it ran exactly the predicted graph's nodes (else the run fails with
  // "disagree about the plan's ops"); the merged trace then holds them with measured times, and
  // the reduce-scatters with the algorithm that really ran on Gloo.
  struct Case {
    std::string flags;
    std::vector<std::string> nodes;
    bool reduce_scatter;
  };
  const std::vector<Case> cases = {
      {"--sharding none --bucket '64 KiB'", {"opt.dp.bucket3.all_reduce", "opt.adamw"}, false},
      {"--sharding zero1 --bucket '64 KiB'",
       {"opt.dp.bucket0.reduce_scatter", "opt.dp.bucket3.reduce_scatter",
        "opt.head.param_all_gather"},
       true},
      {"--sharding fsdp --prefetch 1",
       {"mb0.fwd.embed.fsdp.all_gather", "L0.mb1.fwd.fsdp.all_gather",
        "mb1.bwd.head.fsdp.all_gather", "L1.mb1.bwd.fsdp.reduce_scatter",
        "mb0.bwd.embed.fsdp.reduce_scatter"},
       true},
      // A recomputed layer's bucket is gathered (and copied out) for its recomputation.
      {"--sharding fsdp --prefetch 1 --recompute full",
       {"L1.mb1.rcp.fsdp.all_gather", "L1.mb1.rcp.fsdp.copy_out", "L0.mb0.rcp.fsdp.all_gather",
        "mb1.bwd.head.fsdp.all_gather", "L1.mb1.bwd.fsdp.reduce_scatter"},
       true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    const std::string dir = test::fresh_dir("shard-trace");
    std::filesystem::remove_all(dir);
    const Ran r = run_cli(
        "--model tiny --cluster local --dp 2 --global-batch 4 --seq 32 --steps 2 --seed 1 " +
        c.flags + " --out " + dir);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto nodes = rank0_nodes(dir + "/trace.json");
    for (const auto& name : c.nodes) {
      ASSERT_TRUE(nodes.count(name)) << name;
      EXPECT_GT(nodes.at(name).value("duration_s", 0.0), 0) << name;
    }
    for (const auto& [name, n] :
         nodes) {  // data-parallel collectives: reduce-scatters say how they ran
      if (name.rfind("opt.dp.", 0) != 0 && name.find("fsdp.") == std::string::npos) continue;
      const bool reduce_scatter = name.find("reduce_scatter") != std::string::npos;
      EXPECT_EQ(n.value("algorithm", ""), reduce_scatter ? "alltoall+sum" : "") << name;
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(ShardingTrace, Bf16GradientReductionsCarryHalfTheBytes) {
  // The same plans with grad_reduce_dtype fp32 and bf16: every gradient reduction is marked bf16
  // (set where the executor really cast the gradients), with half the lowering's bytes; the
  // parameter gathers are unchanged.
  struct Case {
    std::string flags;
    std::vector<std::string> reductions;
    std::string algorithm;  // of the first reduction
  };
  const std::vector<Case> cases = {
      {"--dp 2 --global-batch 4 --bucket '64 KiB'",
       {"opt.dp.bucket0.all_reduce", "opt.dp.bucket3.all_reduce"},
       "alltoall+sum+allgather"},
      {"--dp 4 --global-batch 8 --sharding hsdp --shard-group 2",
       {"L0.mb1.bwd.fsdp.reduce_scatter", "opt.hsdp.replica_all_reduce"},
       "alltoall+sum"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    std::map<std::string, std::map<std::string, nlohmann::json>> runs;
    for (const std::string dtype : {"fp32", "bf16"}) {
      const std::string dir = test::fresh_dir("shard-trace-reduce-" + dtype);
      std::filesystem::remove_all(dir);
      const Ran r = run_cli("--model tiny --cluster local --seq 32 --steps 2 --seed 1 " + c.flags +
                            " --grad-reduce-dtype " + dtype + " --out " + dir);
      ASSERT_EQ(r.status, 0) << r.out;
      runs[dtype] = rank0_nodes(dir + "/trace.json");
      std::filesystem::remove_all(dir);
    }
    for (const auto& name : c.reductions) {
      ASSERT_TRUE(runs["bf16"].count(name) && runs["fp32"].count(name)) << name;
      const auto& fp32 = runs["fp32"].at(name);
      const auto& bf16 = runs["bf16"].at(name);
      EXPECT_EQ(bf16.value("dtype", ""), "bf16") << name;
      EXPECT_EQ(fp32.value("dtype", ""), "") << name;
      EXPECT_GT(fp32.value("comm_bytes", 0.0), 0) << name;
      EXPECT_DOUBLE_EQ(bf16.value("comm_bytes", 0.0), fp32.value("comm_bytes", 0.0) / 2) << name;
    }
    EXPECT_EQ(runs["bf16"].at(c.reductions.front()).value("algorithm", ""), c.algorithm);
    if (runs["bf16"].count("mb0.fwd.embed.fsdp.all_gather")) {
      EXPECT_EQ(runs["bf16"].at("mb0.fwd.embed.fsdp.all_gather").value("dtype", ""), "");
    }
  }
}

TEST(ShardingTrace, HsdpCollectivesAreTheLoweringsNodes) {
  // dp 4 in shard groups of 2: the FSDP collectives (over the shard group) and the replica
  // all-reduce are timed under the lowering's names; the run fails if any op the executor ran is
  // not a node of the predicted graph, or a node never ran.
  const std::string dir = test::fresh_dir("shard-trace-hsdp");
  std::filesystem::remove_all(dir);
  const Ran r = run_cli(
      "--model tiny --cluster local --dp 4 --global-batch 8 --seq 32 --steps 2 --seed 1 "
      "--sharding hsdp --shard-group 2 --prefetch 1 --out " +
      dir);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto nodes = rank0_nodes(dir + "/trace.json");
  for (const std::string name : {"mb0.fwd.embed.fsdp.all_gather", "L1.mb1.fwd.fsdp.all_gather",
                                 "mb1.bwd.head.fsdp.all_gather", "L0.mb1.bwd.fsdp.reduce_scatter",
                                 "opt.hsdp.replica_all_reduce"}) {
    ASSERT_TRUE(nodes.count(name)) << name;
    EXPECT_GT(nodes.at(name).value("duration_s", 0.0), 0) << name;
  }
  // The replica all-reduce carries this rank's chunks: half of tiny's 106,816 parameters, fp32.
  EXPECT_DOUBLE_EQ(nodes.at("opt.hsdp.replica_all_reduce").value("comm_bytes", 0.0), 53408.0 * 4);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orrery::executor
