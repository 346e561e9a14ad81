// bf16 mixed precision with tensor, sequence and expert parallelism and with ZeRO/FSDP sharding
// (executor/src/mixed_precision.hpp): every plan trains on real ranks (Gloo over loopback) to the
// losses, gradient norms and parameters of a one-process bf16 run of the same model and seed, and
// its collectives carry the bytes the simulator's lowering assumes for bf16 (activations and
// gathered parameters 2 bytes, gradient reductions 4).
//
// What may differ from one process, and so the tolerances (3 AdamW steps, lr 1e-3, losses ~5.5):
// - TP/SP: each rank's row-parallel GEMM output is a partial sum rounded to bf16 before the
//   reduction, and the reduced sum is rounded once more (one process rounds the full GEMM output
//   once); the same holds for the activation gradients reduced in backward, and the embedding's
//   partial lookups are rounded to bf16 on the wire. Each rounding is at most 2^-9 relative, and
//   they are independent across the 128 token losses of a step, so the mean loss moves by ~1e-4
//   (as the pp2 test's single bf16 boundary does): tolerance 1e-3.
// - ZeRO/FSDP: the model computes with bf16-rounded parameters, norms and embeddings included
//   (one process rounds only the GEMM weights, in autocast): the embedding and norm weights move
//   by up to 2^-9 relative, the same size of change: loss tolerance 1e-3.
// - Gradient norms: dominated by the largest gradients, which those roundings perturb by about
//   2^-9 ~ 2e-3 relative at most; tolerance 1e-2 relative.
// - Parameters: AdamW moves an element by about lr whatever its gradient's size, so an element
//   whose tiny gradient changes sign under a rounding ends up to 2 x lr x 3 steps = 6e-3 away:
//   tolerance 1e-2 (the pp2 bf16 test's bound). Saved parameters are the fp32 masters.
// - EP: the all-to-alls move values one process also has in bf16 (the experts' inputs are
//   rounded by their GEMMs anyway, their outputs are bf16), so the forward of a step's first
//   micro-batch is the same; but an expert's bf16 weight-gradient GEMM now covers the rows of two
//   ranks' micro-batches at once and rounds their sum to bf16 once, where one process rounds each
//   micro-batch's: the same 2^-9 roundings of gradients as above, and the same tolerances.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "executor_test_util.hpp"
#include "mixed_precision.hpp"
#include "orrery/executor/data_parallel.hpp"
#include "orrery/executor/train_config.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/spec_io.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

constexpr int64_t kSteps = 3;
constexpr double kLossTolerance = 1e-3;      // absolute (see the file comment)
constexpr double kGradNormTolerance = 1e-2;  // relative
constexpr double kParamTolerance = 1e-2;     // absolute

using test::Outcome;
using test::Plan;

std::string moe() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-moe.yaml"; }
std::string gpt() { return std::string(ORRERY_EXECUTOR_TEST_DIR) + "/tiny-gpt.yaml"; }

std::vector<std::string> bf16(std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--precision", "bf16"});
  return extra;
}

Outcome train(const std::string& model, const Plan& plan) {
  return test::train("bf16par-", model, plan, kSteps);
}

// The one-process bf16 run of `model`, trained once per test program.
const Outcome& reference(const std::string& model) {
  return test::one_process("bf16par-", model, kSteps, bf16({}));
}

void expect_close(const std::string& model, const Plan& plan) {
  test::expect_matches(reference(model), train(model, plan), kLossTolerance, kParamTolerance,
                       kGradNormTolerance);
}

TEST(Bf16MatchesOneProcess, Tp2) {
  // Row-parallel outputs and the embedding all-reduced as bf16 (alltoall + fp32 sum + all-gather).
  expect_close("tiny", {"tp2", 2, 1, 1, bf16({})});
}

TEST(Bf16MatchesOneProcess, Tp2SequenceParallel) {
  // bf16 reduce-scatters (alltoall + fp32 sum) and all-gathers along the sequence.
  expect_close("tiny", {"tp2-sp", 2, 1, 1, bf16({"--sp"})});
}

TEST(Bf16MatchesOneProcess, Tp2SequenceParallelGptStyle) {
  // LayerNorm, biases, learned positions (added after the embedding's bf16 reduce-scatter) and a
  // tied, vocabulary-parallel embedding and head.
  expect_close(gpt(), {"gpt-tp2-sp", 2, 1, 1, bf16({"--sp"})});
}

TEST(Bf16MatchesOneProcess, Zero3Dp2GptStyleTiedEmbeddings) {
  // 200,000-byte buckets of bf16 parameters: {embed, L0, L1} and {head}; the tied embedding's
  // bucket stays gathered (bf16-rounded) from its forward to the LM head's backward.
  expect_close(gpt(),
               {"gpt-zero3", 1, 2, 1, bf16({"--sharding", "zero3", "--bucket-bytes", "200000"})});
}

TEST(Bf16MatchesOneProcess, Zero1Dp2) {
  expect_close("tiny",
               {"zero1", 1, 2, 1, bf16({"--sharding", "zero1", "--bucket-bytes", "65536"})});
}

TEST(Bf16MatchesOneProcess, Zero2Dp2OverlappedGathers) {
  expect_close("tiny", {"zero2", 1, 2, 1, bf16({"--sharding", "zero2", "--overlap-param-gather"})});
}

TEST(Bf16MatchesOneProcess, FsdpDp2) {
  // 100,000-byte buckets: 50,000 bf16 parameters each, the lowering's rule for bf16.
  expect_close("tiny",
               {"fsdp", 1, 2, 1,
                bf16({"--sharding", "fsdp", "--bucket-bytes", "100000", "--prefetch", "1"})});
}

TEST(Bf16MatchesOneProcess, FsdpTp2Dp2SequenceParallel) {
  // 2 x 2: bf16 parameter gathers over dp of chunks holding TP shards, bf16 SP collectives over tp.
  expect_close("tiny", {"fsdp-tp2-dp2", 2, 2, 1, bf16({"--sharding", "fsdp", "--sp"})});
}

TEST(Bf16MatchesOneProcess, Ep2Dp2) {
  // Dispatch and combine carry bf16; nothing is reduced on the wire but the fp32 gradients.
  expect_close(moe(), {"ep2", 1, 2, 1, bf16({"--ep", "2"})});
}

TEST(Bf16MatchesOneProcess, Ep2Dp2Zero1Tp2) {
  // 2 x 2 x (ep 2 inside dp 2): experts' chunks gathered as bf16 over the expert-data-parallel
  // group (one rank here), dense ones over dp, TP reductions of the MoE outputs in bf16.
  expect_close(moe(), {"ep2-zero1-tp2", 2, 2, 1, bf16({"--ep", "2", "--sharding", "zero1"})});
}

// ---- Gloo carries bf16 as fp16 bytes, bit for bit ----

TEST(Bf16OnGloo, Fp16ViewsMoveEveryBitPattern) {
  // Two ranks in one process (threads, a HashStore): all-gather and all-to-all of 65,536 random
  // bf16 bit patterns (fp16 NaNs and subnormals among them) viewed as fp16 arrive unchanged.
  // Also prints whether this libtorch's Gloo takes bf16 itself (1.13: "Invalid scalar type").
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto gen = at::detail::createCPUGenerator(5);
  const auto bits = torch::randint(-32768, 32768, {65536}, gen, torch::kInt32).to(torch::kInt16);
  std::vector<bool> gathered_ok(2, false), exchanged_ok(2, false);
  std::string direct;
  auto rank = [&](int r) {
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, 2, options);
    const auto mine = (r == 0 ? bits : bits.flip(0)).view(torch::kBFloat16);
    std::vector<std::vector<at::Tensor>> out(1);
    std::vector<at::Tensor> full;
    for (int i = 0; i < 2; ++i) {
      full.push_back(torch::empty_like(mine));
      out[0].push_back(gloo_view(full.back()));
    }
    std::vector<at::Tensor> in{gloo_view(mine)};
    group->allgather(out, in)->wait();
    gathered_ok[r] = torch::equal(full[0].view(torch::kInt16), bits) &&
                     torch::equal(full[1].view(torch::kInt16), bits.flip(0));
    auto received = torch::empty_like(mine);
    auto out_view = gloo_view(received), in_view = gloo_view(mine);
    std::vector<int64_t> equal;
    group->alltoall_base(out_view, in_view, equal, equal)->wait();
    // Rank r receives half r of both ranks' tensors.
    const auto half = [&](const at::Tensor& t) { return t.narrow(0, r * 32768, 32768); };
    exchanged_ok[r] =
        torch::equal(received.view(torch::kInt16).narrow(0, 0, 32768), half(bits)) &&
        torch::equal(received.view(torch::kInt16).narrow(0, 32768, 32768), half(bits.flip(0)));
    try {
      std::vector<at::Tensor> t{mine.clone()};
      group->allreduce(t)->wait();
      if (r == 0) direct = "accepted";
    } catch (const std::exception& e) {
      if (r == 0) direct = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    }
  };
  std::thread a(rank, 0), b(rank, 1);
  a.join();
  b.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(gathered_ok[r]) << "rank " << r;
    EXPECT_TRUE(exchanged_ok[r]) << "rank " << r;
  }
  std::cout << "a bf16 all-reduce on this Gloo: " << direct << std::endl;
}

// ---- Bytes on the wire: the executor's collectives against the lowering's ----

TrainConfig config(const std::string& model, int64_t tp, int64_t dp, pb::Sharding sharding,
                   double bucket_bytes) {
  TrainConfig c;
  c.model = models::load_model(model);
  c.plan.set_model(c.model.name());
  c.plan.mutable_job()->set_global_batch_size(4 * dp);
  c.plan.mutable_job()->set_seq_len(32);
  c.plan.mutable_job()->set_precision(pb::PRECISION_BF16);
  c.plan.mutable_parallel()->set_tp(tp);
  c.plan.mutable_parallel()->set_dp(dp);
  c.plan.mutable_parallel()->set_pp(1);
  c.plan.set_micro_batch_size(1);
  c.plan.set_sharding(sharding);
  c.plan.set_bucket_bytes(bucket_bytes);
  return c;
}

TEST(Bf16Layout, FsdpBucketsAndGathersAsTheLowering) {
  // FSDP buckets hold bucket_bytes / 2 bf16 parameters, and the gathers carry 2 bytes per
  // parameter, the gradient reductions 4 (the lowering's param_bytes and grad_bytes for bf16).
  auto cluster = topologies::load_cluster("dgx-h100", 1);
  for (const auto sharding : {pb::SHARDING_ZERO1, pb::SHARDING_FSDP}) {
    for (const double bucket : {65536.0, 100000.0, 200000.0}) {
      const TrainConfig c = config("tiny", 1, 2, sharding, bucket);
      ASSERT_EQ(unsupported_reason(c), "");
      cluster.mutable_node_types(0)->set_devices_per_node(2);
      plan::LowerOptions o;
      o.ranks = {0};
      const auto g = plan::lower(plan::resolve_plan(c.plan, c.model, cluster), o);
      std::vector<std::string> theirs;
      std::map<std::string, double> bytes;
      for (const auto& n : g.ranks(0).nodes()) {
        if (n.kind() != pb::NODE_KIND_COLLECTIVE) continue;
        bytes[n.name()] = n.comm_bytes();
        const bool fsdp_gather = n.name().find("fsdp.all_gather") != std::string::npos &&
                                 n.micro_batch() == 0 && n.phase() == pb::PHASE_FORWARD;
        const bool optimizer = n.name().rfind("opt.dp.", 0) == 0 ||
                               n.name().find("param_all_gather") != std::string::npos;
        if (fsdp_gather || optimizer) theirs.push_back(n.name());
      }
      const auto mine = data_parallel_collectives(c, 0);
      std::vector<std::string> names;
      for (const auto& m : mine) names.push_back(m.name);
      SCOPED_TRACE(pb::Sharding_Name(sharding) + " bucket " + std::to_string(bucket));
      ASSERT_EQ(names, theirs);
      for (const auto& m : mine) {
        const bool gather = m.name.find("all_gather") != std::string::npos;
        EXPECT_DOUBLE_EQ(bytes.at(m.name), static_cast<double>(m.params) * (gather ? 2 : 4))
            << m.name;
      }
    }
  }
}

// ---- The measured trace says what each collective carried ----

// Rank 0's measured nodes of `orrery run <args> --precision bf16` (2 steps), by name.
std::map<std::string, pb::ExecNode> traced(const std::string& name, const std::string& args) {
  const std::string dir = test::fresh_dir("bf16-trace-" + name);
  std::filesystem::remove_all(dir);  // `orrery run` creates it
  const test::Ran r =
      test::run_cli(ORRERY_RUN_CLI_BIN,
                    args + " --precision bf16 --cluster local --steps 2 --seed 5 --out " + dir);
  EXPECT_EQ(r.status, 0) << r.out;  // also: the executor ran exactly the lowering's nodes
  std::map<std::string, pb::ExecNode> nodes;
  if (r.status != 0) return nodes;
  pb::ExecGraph measured;
  read_spec_file(dir + "/trace.json", &measured);
  for (const auto& n : measured.ranks(0).nodes()) nodes[n.name()] = n;
  std::filesystem::remove_all(dir);
  return nodes;
}

void expect_node(const std::map<std::string, pb::ExecNode>& nodes, const std::string& name,
                 const std::string& dtype, const std::string& algorithm) {
  ASSERT_TRUE(nodes.count(name)) << name;
  EXPECT_EQ(nodes.at(name).dtype(), dtype) << name;
  EXPECT_EQ(nodes.at(name).algorithm(), algorithm) << name;
}

TEST(Bf16Trace, TensorAndSequenceParallelCollectivesCarryBf16) {
  const auto sp = traced("tp2sp", "--model tiny --tp 2 --sp --dp 1 --global-batch 2 --seq 32");
  expect_node(sp, "mb0.fwd.embed.tokens.reduce_scatter", "bf16", "alltoall+sum");
  expect_node(sp, "L0.mb0.fwd.attn.norm.all_gather", "bf16", "");
  expect_node(sp, "L1.mb0.fwd.mlp.down.reduce_scatter", "bf16", "alltoall+sum");
  expect_node(sp, "L1.mb0.bwd.mlp.down.grad.all_gather", "bf16", "");
  expect_node(sp, "L0.mb0.bwd.attn.norm.grad.reduce_scatter", "bf16", "alltoall+sum");
  expect_node(sp, "mb0.fwd.head.loss.max.all_reduce", "", "");  // the loss's statistics stay fp32
  expect_node(sp, "mb0.fwd.head.loss.sum.all_reduce", "", "");
  const auto tp = traced("tp2", "--model tiny --tp 2 --dp 1 --global-batch 2 --seq 32");
  expect_node(tp, "L0.mb0.fwd.attn.out.all_reduce", "bf16", "alltoall+sum+allgather");
  expect_node(tp, "L0.mb0.bwd.mlp.norm.grad.all_reduce", "bf16", "alltoall+sum+allgather");
}

TEST(Bf16Trace, ExpertAllToAllsAndParameterGathersCarryBf16) {
  const auto ep = traced(
      "ep2zero1", "--model " + moe() + " --dp 2 --ep 2 --global-batch 4 --seq 32 --sharding zero1");
  expect_node(ep, "L1.mb0.fwd.moe.router.all_to_all", "bf16", "");
  expect_node(ep, "L1.mb0.fwd.moe.experts.down.all_to_all", "bf16", "");
  expect_node(ep, "L2.mb1.bwd.moe.router.grad.all_to_all", "bf16", "");
  expect_node(ep, "opt.L1.param_all_gather", "bf16", "");
  expect_node(ep, "opt.dp.bucket0.reduce_scatter", "", "alltoall+sum");  // gradients: fp32
  const auto fsdp = traced("fsdp", "--model tiny --dp 2 --global-batch 4 --seq 32 --sharding fsdp");
  expect_node(fsdp, "mb0.fwd.embed.fsdp.all_gather", "bf16", "");
  expect_node(fsdp, "L1.mb1.bwd.fsdp.all_gather", "bf16", "");
  expect_node(fsdp, "L1.mb1.bwd.fsdp.reduce_scatter", "", "alltoall+sum");
}

}  // namespace
}  // namespace orrery::executor
