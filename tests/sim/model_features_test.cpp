// The model features of docs/models.md#attention-variants in the simulator: where the parallel
// block's one TP reduction lands in the layer program, per-layer local/global op tables in the
// lowering and the memory model, and the two engines agreeing on each feature (one DGX H100, no
// contention). Derivations next to each expected number.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

struct Job {
  int64_t tp = 1, dp = 8, seq = 4096, layers = 4;
  bool sp = false, materialized = false;
  std::function<void(pb::ModelSpec&)> feature = [](pb::ModelSpec&) {};
};

// Llama 3 8B cut to `layers` layers, one micro-batch of one sequence per rank.
plan::ResolvedPlan resolve(const Job& j) {
  pb::ModelSpec spec = models::load_model("llama3-8b");
  spec.set_num_layers(j.layers);
  j.feature(spec);
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(j.dp);
  p.mutable_job()->set_seq_len(j.seq);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(j.tp);
  p.mutable_parallel()->set_dp(j.dp);
  p.mutable_parallel()->set_sequence_parallel(j.sp);
  p.set_micro_batch_size(1);
  if (j.materialized) p.set_attention_kernel(pb::ATTENTION_KERNEL_MATERIALIZED);
  return plan::resolve_plan(p, spec, topologies::load_cluster("dgx-h100", 1));
}

int count_tp_collectives(const plan::ResolvedPlan& r, pb::Phase phase) {
  const plan::detail::OpTables t = plan::detail::make_op_tables(r);
  int n = 0;
  for (const auto& s : plan::detail::layer_program(t.layer(r.model, 0), r, phase)) {
    n +=
        s.kind == plan::detail::Step::Kind::kCollective && s.group == plan::detail::Step::Group::kTp
            ? 1
            : 0;
  }
  return n;
}

// Forward FLOPs of layer l's attention core (attn.core) in the plan's op tables.
double attention_core_flops(const plan::ResolvedPlan& r, const plan::detail::OpTables& t,
                            int64_t l) {
  for (const auto& op : t.layer(r.model, l)) {
    if (op.name == "attn.core") return op.forward_flops;
  }
  return 0.0;
}

TEST(ModelFeaturesSim, ParallelBlockHalvesTheLayersTpCollectives) {
  Job j;
  j.tp = 2;
  j.dp = 4;
  const auto parallel = [](pb::ModelSpec& m) { m.set_parallel_block(true); };
  // Megatron without SP: an all-reduce after attn.out and one after mlp.down in forward, one
  // before each block norm's backward; the parallel block has one of each.
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_FORWARD), 2);
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_BACKWARD), 2);
  j.feature = parallel;
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_FORWARD), 1);
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_BACKWARD), 1);
  // With SP each reduction is a reduce-scatter plus an all-gather: 4 per layer and pass, 2.
  j.sp = true;
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_FORWARD), 2);
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_BACKWARD), 2);
  j.feature = [](pb::ModelSpec&) {};
  EXPECT_EQ(count_tp_collectives(resolve(j), pb::PHASE_FORWARD), 4);
}

TEST(ModelFeaturesSim, LocalAndGlobalLayersGetTheirOwnTables) {
  Job j;
  j.feature = [](pb::ModelSpec& m) {
    m.set_sliding_window(1024);
    m.set_sliding_window_pattern(2);
  };
  const plan::ResolvedPlan r = resolve(j);
  const plan::detail::OpTables t = plan::detail::make_op_tables(r);
  auto core_flops = [&](int64_t l) { return attention_core_flops(r, t, l); };
  // s = 4096, w = 1024: (4096 x 1024 - 1024^2 / 2) / 4096^2 = 7/32 of the square on layers 0
  // and 2, 1/2 on layers 1 and 3; 32 heads x 2 x (128 + 128) FLOPs per pair.
  const double square = 32.0 * 4096 * 4096 * 512;
  EXPECT_DOUBLE_EQ(core_flops(0), square * 7 / 32);
  EXPECT_DOUBLE_EQ(core_flops(1), square / 2);
  EXPECT_DOUBLE_EQ(core_flops(2), square * 7 / 32);
  EXPECT_DOUBLE_EQ(core_flops(3), square / 2);
}

// Qwen's layout (sliding_window_from_layer): layers before it global, the ones after local; the
// step lies between all-global and all-local, and both engines price it alike.
TEST(ModelFeaturesSim, WindowFromALayerOnKeepsTheLayersBeforeGlobal) {
  Job j;
  j.feature = [](pb::ModelSpec& m) {
    m.set_sliding_window(1024);
    m.set_sliding_window_from_layer(3);
  };
  const plan::ResolvedPlan r = resolve(j);
  const plan::detail::OpTables t = plan::detail::make_op_tables(r);
  auto core_flops = [&](int64_t l) { return attention_core_flops(r, t, l); };
  const double square = 32.0 * 4096 * 4096 * 512;
  for (int64_t l = 0; l < 3; ++l) EXPECT_DOUBLE_EQ(core_flops(l), square / 2) << l;
  EXPECT_DOUBLE_EQ(core_flops(3), square * 7 / 32);
  auto step = [](const Job& job, EngineKind engine) {
    const plan::ResolvedPlan p = resolve(job);
    const topologies::Topology topology(p.cluster);
    const CostModels costs(topology, p.precision.dtype);
    return simulate(p, costs, engine).result.step_time_s();
  };
  Job global = j, local = j;
  global.feature = [](pb::ModelSpec&) {};
  local.feature = [](pb::ModelSpec& m) { m.set_sliding_window(1024); };
  const double mixed = step(j, EngineKind::kAnalytic);
  EXPECT_LT(mixed, step(global, EngineKind::kAnalytic));
  EXPECT_GT(mixed, step(local, EngineKind::kAnalytic));
  EXPECT_NEAR(step(j, EngineKind::kDes), mixed, 0.02 * mixed);
}

TEST(ModelFeaturesSim, MemoryModelCountsEachFeaturesSavedBytes) {
  auto activations = [](const Job& j) {
    return memory_per_stage(resolve(j)).at(0).activations_bytes();
  };
  Job plain;
  plain.materialized = true;
  Job capped = plain;
  capped.feature = [](pb::ModelSpec& m) { m.set_attn_logit_softcapping(50); };
  // The capped scores kept per layer: 32 heads x 4096^2 x 2 bytes = 1 GiB, 4 layers.
  EXPECT_DOUBLE_EQ(activations(capped) - activations(plain), 4.0 * 32 * 4096 * 4096 * 2);
  Job parallel;
  parallel.feature = [](pb::ModelSpec& m) { m.set_parallel_block(true); };
  // Neither mlp.norm's input nor mlp.up's is kept: 2 x 4096 tokens x 4096 x 2 bytes per layer.
  EXPECT_DOUBLE_EQ(activations(Job{}) - activations(parallel), 4.0 * 2 * 4096 * 4096 * 2);
}

// The two engines agree on each feature where nothing contends (one node, data parallel, or
// TP 2 for the parallel block).
TEST(ModelFeaturesSim, EnginesAgree) {
  std::vector<std::pair<std::string, Job>> jobs;
  Job j;
  j.feature = [](pb::ModelSpec& m) {
    m.set_sliding_window(1024);
    m.set_sliding_window_pattern(2);
  };
  jobs.emplace_back("sliding window 1024, pattern 2", j);
  j = Job{};
  j.materialized = true;
  j.feature = [](pb::ModelSpec& m) {
    m.set_position_embedding(pb::POSITION_EMBEDDING_ALIBI);
    m.clear_rotary_fraction();
  };
  jobs.emplace_back("alibi, materialized", j);
  j.feature = [](pb::ModelSpec& m) {
    m.set_attn_logit_softcapping(50);
    m.set_final_logit_softcapping(30);
    m.set_post_block_norm(true);
  };
  jobs.emplace_back("soft-capping + post norms, materialized", j);
  j.materialized = false;
  jobs.emplace_back("soft-capping + post norms, flash", j);
  j = Job{};
  j.tp = 2;
  j.dp = 4;
  j.sp = true;
  j.feature = [](pb::ModelSpec& m) { m.set_parallel_block(true); };
  jobs.emplace_back("parallel block, tp 2 sp", j);
  for (const auto& [name, job] : jobs) {
    const plan::ResolvedPlan p = resolve(job);
    const topologies::Topology topology(p.cluster);
    const CostModels costs(topology, p.precision.dtype);
    const double des = simulate(p, costs, EngineKind::kDes).result.step_time_s();
    const double analytic = simulate(p, costs, EngineKind::kAnalytic).result.step_time_s();
    EXPECT_NEAR(des, analytic, 0.02 * analytic) << name;
    std::printf("%s: des %.6f s, analytic %.6f s\n", name.c_str(), des, analytic);
  }
}

// docs/simulator.md's worked example: Llama 3 8B on one DGX H100, tp 2 (SP) x dp 4, ZeRO-1,
// global batch 32 x 8192 tokens, micro-batch 1 (the FP8 example's plan), with each feature
// switched on alone. Prints what the doc's table shows; checks the direction each must move.
TEST(ModelFeaturesSim, WorkedExample) {
  struct Variant {
    const char* name;
    bool materialized;
    std::function<void(pb::ModelSpec&)> feature;
  };
  auto run = [](const Variant& v) {
    pb::ModelSpec spec = models::load_model("llama3-8b");
    v.feature(spec);
    pb::Plan p;
    p.set_model("llama3-8b");
    p.set_cluster("dgx-h100");
    p.mutable_job()->set_global_batch_size(32);
    p.mutable_job()->set_seq_len(8192);
    p.mutable_job()->set_precision(pb::PRECISION_BF16);
    p.mutable_parallel()->set_tp(2);
    p.mutable_parallel()->set_dp(4);
    p.mutable_parallel()->set_sequence_parallel(true);
    p.set_sharding(pb::SHARDING_ZERO1);
    p.set_micro_batch_size(1);
    if (v.materialized) p.set_attention_kernel(pb::ATTENTION_KERNEL_MATERIALIZED);
    const plan::ResolvedPlan r =
        plan::resolve_plan(p, spec, topologies::load_cluster("dgx-h100", 1));
    const topologies::Topology topology(r.cluster);
    const CostModels costs(topology, r.precision.dtype);
    const SimOutput out = simulate(r, costs, EngineKind::kAnalytic);
    double tp = 0;
    for (const auto& c : out.result.breakdown().exposed_comm()) {
      if (c.name() == "tp") tp = c.seconds();
    }
    std::printf("%s: step %.4f s, compute %.4f s, exposed tp %.4f s, activations %.3f GiB\n",
                v.name, out.result.step_time_s(), out.result.breakdown().compute_s(), tp,
                memory_per_stage(r).at(0).activations_bytes() / (1 << 30));
    return out.result.step_time_s();
  };
  const auto none = [](pb::ModelSpec&) {};
  const double flash = run({"flash, rope", false, none});
  const double window = run(
      {"window 4096, every layer", false, [](pb::ModelSpec& m) { m.set_sliding_window(4096); }});
  const double gemma3 = run({"window 1024, pattern 6", false, [](pb::ModelSpec& m) {
                               m.set_sliding_window(1024);
                               m.set_sliding_window_pattern(6);
                             }});
  const double parallel =
      run({"parallel block", false, [](pb::ModelSpec& m) { m.set_parallel_block(true); }});
  const double alibi = run({"alibi", false, [](pb::ModelSpec& m) {
                              m.set_position_embedding(pb::POSITION_EMBEDDING_ALIBI);
                              m.clear_rotary_fraction();
                            }});
  const auto caps = [](pb::ModelSpec& m) {
    m.set_attn_logit_softcapping(50);
    m.set_final_logit_softcapping(30);
  };
  const double capped = run({"soft-capping 50 / 30", false, caps});
  const double eager = run({"materialized, rope", true, none});
  const double eager_capped = run({"materialized, soft-capping 50 / 30", true, caps});
  EXPECT_LT(window, flash);
  EXPECT_LT(gemma3, window);  // 5 of 6 layers at w = 1024 < 4096
  EXPECT_LT(parallel, flash);
  EXPECT_GT(capped, flash);
  EXPECT_GT(eager_capped, eager);
  EXPECT_NEAR(alibi, flash, 0.01 * flash);  // one add per score against no RoPE op
}

}  // namespace
}  // namespace orrery::sim
