// Mixture-of-experts layers and expert parallelism in the executor: an MoE model trains in one
// process, and every EP plan (real ranks, Gloo all-to-alls over loopback) trains to the same
// losses, gradient norms and parameters as one process with the same model and seed. Exact
// routing (no capacity, no dropped tokens) leaves only fp32 summation order as a difference: the
// experts' GEMMs see the tokens of several ranks at once, and gradients are summed across ranks.
// With an expert capacity (ExpertCapacity), plans are compared where they route the same tokens
// together.
//
// Models: tests/executor/tiny-moe.yaml (Llama-style, a dense first layer, then 2 MoE layers of 4
// SwiGLU experts, top-2, plus a shared expert) and tiny-moe-gpt.yaml (GPT-style: LayerNorm, GeLU,
// biases on the experts too, tied embeddings, 2 MoE layers, no shared expert).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "executor_test_util.hpp"
#include "orrery/executor/results.hpp"
#include "orrery/executor/train_config.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 3;
constexpr double kLossTolerance = 1e-5;   // absolute, on losses ~5.5
constexpr double kParamTolerance = 1e-4;  // absolute, on parameters ~0.02..1

std::string spec(const std::string& file) {
  return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/" + file;
}

struct Plan {
  std::string name;
  int64_t tp = 1, dp = 1, pp = 1, ep = 1;
  std::vector<std::string> extra;
  int64_t seq = 32;
};

using test::Outcome;

Outcome train(const std::string& model, const Plan& plan, int64_t steps = kSteps) {
  const std::string dir = test::fresh_dir("moe-" + plan.name);
  std::vector<std::string> args = {"--model",        model,
                                   "--tp",           std::to_string(plan.tp),
                                   "--dp",           std::to_string(plan.dp),
                                   "--pp",           std::to_string(plan.pp),
                                   "--ep",           std::to_string(plan.ep),
                                   "--global-batch", "4",
                                   "--micro-batch",  "1",
                                   "--seq",          std::to_string(plan.seq),
                                   "--steps",        std::to_string(steps),
                                   "--seed",         "7",
                                   "--out",          dir,
                                   "--save-params"};
  args.insert(args.end(), plan.extra.begin(), plan.extra.end());
  const std::string out = test::launch(plan.tp * plan.dp * plan.pp, args);
  EXPECT_NE(out.find("step " + std::to_string(steps) + " loss"), std::string::npos) << out;
  Outcome o = test::read_outcome(dir, steps);
  std::filesystem::remove_all(dir);
  return o;
}

const NamedArray* find(const Outcome& o, const std::string& name) {
  for (const auto& a : o.params) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

void expect_matches(const Outcome& ref, const Outcome& got) {
  test::expect_matches(ref, got, kLossTolerance, kParamTolerance);
}

// Every routed expert moved in training: each saw tokens in some step, from whichever rank they
// came. (A rank that never received its experts' tokens would leave them at their initial values.)
void expect_every_expert_trained(const Outcome& initial, const Outcome& trained,
                                 const pb::ModelSpec& m) {
  for (int64_t l = m.moe().first_dense_layers(); l < m.num_layers(); ++l) {
    for (int64_t e = 0; e < m.moe().num_experts(); ++e) {
      const std::string name =
          "layers." + std::to_string(l) + ".moe.experts." + std::to_string(e) + ".down.weight";
      const NamedArray* a = find(initial, name);
      const NamedArray* b = find(trained, name);
      ASSERT_TRUE(a != nullptr && b != nullptr) << name;
      double moved = 0;
      for (size_t k = 0; k < a->values.size(); ++k)
        moved = std::max(moved, std::abs(a->values[k] - b->values[k]));
      EXPECT_GT(moved, 1e-5) << name;
    }
  }
}

TEST(MoeSingleProcess, TrainsAndLossFalls) {
  const auto m = models::load_model(spec("tiny-moe.yaml"));
  const Outcome o = train(spec("tiny-moe.yaml"), {"single-5", 1, 1, 1, 1, {}}, 5);
  for (const auto& s : o.steps) EXPECT_TRUE(std::isfinite(s.loss) && std::isfinite(s.grad_norm));
  // The loss falls on the learnable synthetic sequences (from ~ln 256 = 5.5).
  EXPECT_LT(o.steps.back().loss, o.steps.front().loss - 0.05);
  // Layer 0 is dense, layers 1 and 2 are MoE: router, shared expert (width 32) and 4 experts.
  EXPECT_NE(find(o, "layers.0.mlp.up.weight"), nullptr);
  EXPECT_EQ(find(o, "layers.1.mlp.up.weight"), nullptr);
  const NamedArray* router = find(o, "layers.2.moe.router.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->shape, (std::vector<int64_t>{4, 64}));
  const NamedArray* shared = find(o, "layers.1.moe.shared.up.gate_weight");
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->shape, (std::vector<int64_t>{32, 64}));
  const NamedArray* down = find(o, "layers.1.moe.experts.3.down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{64, 64}));
  // Trained after 1 step vs after 5: every expert and the router got gradients.
  const Outcome first = train(spec("tiny-moe.yaml"), {"single-1", 1, 1, 1, 1, {}}, 1);
  expect_every_expert_trained(first, o, m);
  double router_moved = 0;
  const NamedArray* router1 = find(first, "layers.2.moe.router.weight");
  for (size_t k = 0; k < router->values.size(); ++k) {
    router_moved = std::max(router_moved, std::abs(router->values[k] - router1->values[k]));
  }
  EXPECT_GT(router_moved, 1e-5);
}

// ep 2 inside dp 2: each rank holds 2 of the 4 experts; the EP group is the whole dp group and
// the expert-data-parallel groups have one rank.
// Megatron's checkpointed MoE layer (recompute_modules moe, with mlp for the dense first layer):
// the router, dispatch, experts and combine re-run inside the backward, all-to-alls included,
// and training is unchanged; so with the shared expert checkpointed alone (shared_experts).
TEST(ExpertParallelMatchesSingleProcess, Ep2Dp2CheckpointedMoeLayer) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"ep2dp2", 1, 2, 1, 2, {}});
  const auto checkpointed = [](const std::string& name, const std::string& modules) {
    return Plan{name, 1, 2, 1, 2, {"--recompute", "selective", "--recompute-modules", modules}};
  };
  expect_matches(ref, train(spec("tiny-moe.yaml"), checkpointed("ep2dp2-moe-rcp", "moe,mlp")));
  // The shared expert checkpointed alone.
  expect_matches(ref,
                 train(spec("tiny-moe.yaml"), checkpointed("ep2dp2-shared-rcp", "shared_experts")));
}

TEST(ExpertParallelMatchesSingleProcess, Ep2Dp2) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single", 1, 1, 1, 1, {}});
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"ep2dp2", 1, 2, 1, 2, {}}));
}

// One-token sequences: each micro-batch routes 2 copies to 4 experts, so splits of 0 rows are
// common: a rank sending nothing to a peer, receiving nothing at all, experts with no rows.
TEST(ExpertParallelMatchesSingleProcess, Ep2Dp2OneTokenSequences) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single-seq1", 1, 1, 1, 1, {}, 1});
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"ep2dp2-seq1", 1, 2, 1, 2, {}, 1}));
}

// GPT-style: expert biases, GeLU experts, tied embeddings, every layer MoE.
TEST(ExpertParallelMatchesSingleProcess, Ep2Dp2GptStyle) {
  const Outcome ref = train(spec("tiny-moe-gpt.yaml"), {"gpt-single", 1, 1, 1, 1, {}});
  expect_matches(ref, train(spec("tiny-moe-gpt.yaml"), {"gpt-ep2dp2", 1, 2, 1, 2, {}}));
}

// dp 4 with ep 2: two EP groups, and expert gradients averaged over expert-data-parallel pairs
// (ranks 0 and 2 hold experts 0-1, ranks 1 and 3 experts 2-3). Small buckets: several of them.
TEST(ExpertParallelMatchesSingleProcess, Ep2Dp4) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single", 1, 1, 1, 1, {}});
  expect_matches(ref,
                 train(spec("tiny-moe.yaml"), {"ep2dp4", 1, 4, 1, 2, {"--bucket-bytes", "65536"}}));
}

// The same with Megatron's distributed optimizer (zero2): expert gradients reduce-scattered over
// the expert-data-parallel pairs, the chunks updated and all-gathered over them.
TEST(ExpertParallelMatchesSingleProcess, Ep2Dp4Zero2) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single", 1, 1, 1, 1, {}});
  expect_matches(ref,
                 train(spec("tiny-moe.yaml"), {"ep2dp4z2", 1, 4, 1, 2, {"--sharding", "zero2"}}));
}

// No EP: the MoE layers under plain data parallelism (experts replicated, edp = dp).
TEST(ExpertParallelMatchesSingleProcess, Dp2WithoutEp) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single", 1, 1, 1, 1, {}});
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"dp2", 1, 2, 1, 1, {}}));
}

// Experts split over TP too (expert TP = TP): 4 ranks, EP groups {0, 2} and {1, 3}.
TEST(ExpertParallelMatchesSingleProcess, Ep2Tp2Dp2) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single", 1, 1, 1, 1, {}});
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"ep2tp2dp2", 2, 2, 1, 2, {}}));
}

// The same with sequence parallelism and the GPT-style model (bias / tp on each TP rank).
TEST(ExpertParallelMatchesSingleProcess, Ep2Tp2Dp2SequenceParallelGptStyle) {
  const Outcome ref = train(spec("tiny-moe-gpt.yaml"), {"gpt-single", 1, 1, 1, 1, {}});
  expect_matches(ref, train(spec("tiny-moe-gpt.yaml"), {"gpt-ep2tp2dp2sp", 2, 2, 1, 2, {"--sp"}}));
}

// Pipeline stages with EP inside each: experts of stage 1 reach rank 0 for saving through the EP
// group and then the PP group; tied embeddings across the stages.
TEST(ExpertParallelMatchesSingleProcess, Ep2Dp2Pp2GptStyle) {
  const Outcome ref = train(spec("tiny-moe-gpt.yaml"), {"gpt-single", 1, 1, 1, 1, {}});
  expect_matches(ref, train(spec("tiny-moe-gpt.yaml"), {"gpt-ep2dp2pp2", 1, 2, 2, 2, {}}));
}

// Token dropping at an expert capacity (moe_capacity_factor): each rank decides on the tokens
// it routes, so a plan matches one process only where the tokens routed together are the same.
// Factor 0.5 on 32-token micro-batches: capacity ceil(32 x 2 / 4 x 0.5) = 8 copies per expert, 32
// of the 64 copies at most, so copies are dropped in every MoE layer.
const std::vector<std::string> kCapacity = {"--moe-capacity-factor", "0.5"};

// ep 2 in dp 2 against dp 2 without EP: each rank routes its own micro-batches in both, and the
// experts receiving them on another rank drop nothing else. Dropping changes the training.
TEST(ExpertCapacity, Ep2Dp2MatchesDp2) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"dp2-cap", 1, 2, 1, 1, kCapacity});
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"ep2dp2-cap", 1, 2, 1, 2, kCapacity}));
  const Outcome dropless = train(spec("tiny-moe.yaml"), {"dp2", 1, 2, 1, 1, {}});
  EXPECT_GT(std::abs(dropless.steps.front().loss - ref.steps.front().loss), 1e-4);
}

// Padding to the capacity (zero rows through the experts and both all-to-alls) changes the work,
// not the numbers.
TEST(ExpertCapacity, PaddingChangesNothing) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"ep2dp2-cap", 1, 2, 1, 2, kCapacity});
  const std::vector<std::string> padded = {"--moe-capacity-factor", "0.5", "--moe-pad-to-capacity"};
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"ep2dp2-cap-pad", 1, 2, 1, 2, padded}));
}

// TP without SP: both TP ranks route the whole sequence, as one process does.
TEST(ExpertCapacity, Tp2MatchesSingleProcess) {
  const Outcome ref = train(spec("tiny-moe.yaml"), {"single-cap", 1, 1, 1, 1, kCapacity});
  expect_matches(ref, train(spec("tiny-moe.yaml"), {"tp2-cap", 2, 1, 1, 1, kCapacity}));
}

// `orrery run --out` times every op under the simulator's node names and fails (an internal
// error) when the executor ran an op the lowering lacks or skipped one it has; so a traced EP
// run that succeeds ran exactly the lowered MoE graph. Here also: the all-to-alls and experts
// were timed on both ranks, forward and backward.
// `experts`: the suffixes of the routed experts' kernels (".expert0", ".expert1" under
// moe_expert_gemm per_expert, one node per local expert).
void expect_traced_run_matches_the_lowering(const std::string& flags,
                                            const std::vector<std::string>& experts = {""}) {
  const std::string dir = test::fresh_dir("moe-trace");
  std::filesystem::remove_all(dir);  // `orrery run` creates it
  const std::string command =
      std::string("timeout 180 ") + ORRERY_RUN_CLI_BIN + " run --model " + spec("tiny-moe.yaml") +
      " --cluster local --dp 2 --ep 2 --global-batch 4 --seq 32 --steps 2 --seed 5 --out " + dir +
      flags + " 2>&1";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;

  pb::ExecGraph trace;
  read_spec_file(dir + "/trace.json", &trace);
  ASSERT_EQ(trace.ranks_size(), 2);
  for (const auto& rank : trace.ranks()) {
    std::map<std::string, double> seconds;
    for (const auto& node : rank.nodes()) {
      EXPECT_TRUE(node.has_duration_s()) << node.name();
      seconds[node.name()] = node.duration_s();
    }
    std::vector<std::string> names = {"L1.mb0.fwd.moe.router",
                                      "L1.mb0.fwd.moe.router.all_to_all",
                                      "L2.mb1.fwd.moe.shared.up",
                                      "L2.mb1.fwd.moe.experts.down.all_to_all",
                                      "L2.mb0.bwd.moe.router",
                                      "L2.mb0.bwd.moe.experts.down.grad.all_to_all",
                                      "L1.mb1.bwd.moe.router.grad.all_to_all"};
    for (const auto& e : experts) {
      names.push_back("L1.mb0.fwd.moe.experts.up" + e);
      names.push_back("L1.mb1.bwd.moe.experts.down" + e);
    }
    for (const auto& name : names) {
      ASSERT_EQ(seconds.count(name), 1u) << "rank " << rank.rank() << ": " << name;
      EXPECT_GT(seconds[name], 0) << "rank " << rank.rank() << ": " << name;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ExpertParallel, TracedRunMatchesTheLowering) { expect_traced_run_matches_the_lowering(""); }

// The same with a capacity, padded, given as `run` flags.
TEST(ExpertCapacity, TracedRunMatchesTheLowering) {
  expect_traced_run_matches_the_lowering(" --moe-capacity-factor 1.25 --moe-pad-to-capacity");
}

// Megatron-core's SequentialMLP (moe_expert_gemm per_expert): each of a rank's 2 experts is timed
// as its own node, as the lowering has one per local expert (".expert0", ".expert1").
TEST(ExpertParallel, PerExpertGemmsTracedAsTheLowering) {
  expect_traced_run_matches_the_lowering(" --moe-expert-gemm per_expert", {".expert0", ".expert1"});
}

TrainConfig config(const std::string& model, int64_t tp, int64_t dp, int64_t ep) {
  TrainConfig c;
  c.model = models::load_model(model);
  c.plan.mutable_job()->set_global_batch_size(4);
  c.plan.mutable_job()->set_seq_len(32);
  c.plan.mutable_job()->set_precision(pb::PRECISION_FP32);
  c.plan.mutable_parallel()->set_tp(tp);
  c.plan.mutable_parallel()->set_dp(dp);
  c.plan.mutable_parallel()->set_ep(ep);
  c.plan.set_micro_batch_size(1);
  return c;
}

TEST(ExpertParallel, UnsupportedReasons) {
  EXPECT_EQ(unsupported_reason(config(spec("tiny-moe.yaml"), 1, 2, 2)), "");
  EXPECT_EQ(unsupported_reason(config(spec("tiny-moe.yaml"), 2, 4, 4)), "");
  TrainConfig capacity = config(spec("tiny-moe.yaml"), 1, 2, 2);
  capacity.plan.set_moe_capacity_factor(1.25);
  capacity.plan.set_moe_pad_to_capacity(true);
  EXPECT_EQ(unsupported_reason(capacity), "");
  EXPECT_NE(unsupported_reason(config("tiny", 1, 2, 2)).find("rule ep-needs-moe"),
            std::string::npos);
  EXPECT_NE(unsupported_reason(config(spec("tiny-moe.yaml"), 1, 4, 8))
                .find("must divide moe.num_experts 4"),
            std::string::npos);
  EXPECT_NE(
      unsupported_reason(config(spec("tiny-moe.yaml"), 1, 1, 2)).find("must divide dp x cp = 1"),
      std::string::npos);
  TrainConfig odd = config(spec("tiny-moe.yaml"), 2, 1, 1);
  odd.model.mutable_moe()->set_expert_ffn_hidden_size(63);
  EXPECT_NE(unsupported_reason(odd).find("must divide moe.expert_ffn_hidden_size 63"),
            std::string::npos);
  // Still missing: multi-head latent attention.
  const std::string mla = unsupported_reason(config("deepseek-v3", 1, 1, 1));
  EXPECT_NE(mla.find("multi-head latent attention"), std::string::npos) << mla;
}

}  // namespace
}  // namespace orrery::executor
