// Megatron-core's checkpointed recompute modules (recompute selective with recompute_modules mlp,
// moe, shared_experts) and MLA's output-discarding mla_up_proj (docs/simulator.md, layer-level
// checkpointing and Megatron's recompute modules): what each re-runs in the lowering (compute and
// collectives), what the memory model stops keeping, and both engines agreeing on them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

// `model` cut to `layers` layers on one DGX H100: tp 2 with sequence parallelism, dp 4 (ep 4
// for an MoE model), one 4,096-token sequence per micro-batch, global batch 8 (2 micro-batches).
plan::ResolvedPlan resolve(const std::string& model, int64_t layers,
                           const std::vector<pb::RecomputeModule>& modules) {
  pb::Plan p;
  p.set_model(model);
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(4096);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_sequence_parallel(true);
  p.mutable_parallel()->set_dp(4);
  pb::ModelSpec m = models::preset(model);
  m.set_num_layers(layers);
  if (m.has_moe()) p.mutable_parallel()->set_ep(4);
  p.set_micro_batch_size(1);
  p.set_recompute(pb::RECOMPUTE_SELECTIVE);
  for (const auto module : modules) p.add_recompute_modules(module);
  return plan::resolve_plan(p, m, topologies::load_cluster("dgx-h100", 1));
}

struct LayerNodes {
  std::map<std::string, double> forward, rerun;   // compute FLOPs by op
  std::vector<std::string> backward_collectives;  // names, in order (re-runs' included)
};

// Rank 0's layer `layer`, micro-batch 0.
LayerNodes layer_nodes(const plan::ResolvedPlan& plan, int64_t layer) {
  plan::LowerOptions o;
  o.ranks = {0};
  const pb::ExecGraph g = plan::lower(plan, o);
  LayerNodes out;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.layer() != layer || n.micro_batch() != 0) continue;
    if (n.kind() == pb::NODE_KIND_COMPUTE && n.phase() == pb::PHASE_FORWARD)
      out.forward[n.op()] += n.flops();
    if (n.kind() == pb::NODE_KIND_COMPUTE && n.phase() == pb::PHASE_RECOMPUTE)
      out.rerun[n.op()] += n.flops();
    if (n.kind() == pb::NODE_KIND_COLLECTIVE && (n.name().find(".bwd.") != std::string::npos ||
                                                 n.name().find(".rcp.") != std::string::npos))
      out.backward_collectives.push_back(n.name());
  }
  return out;
}

size_t count_with(const std::vector<std::string>& names, const std::string& part) {
  size_t n = 0;
  for (const auto& s : names) n += s.find(part) != std::string::npos ? 1 : 0;
  return n;
}

// mlp: the dense MLP's three ops re-run once (their forward FLOPs), with the sequence-parallel
// gather before the up projection and the reduce-scatter after the down projection: two more TP
// collectives in the layer's backward, nothing else re-run (the list holds no core_attn).
TEST(RecomputeModules, MlpRerunsTheDenseMlpWithItsCollectives) {
  const LayerNodes plain =
      layer_nodes(resolve("llama3-8b", 2, {pb::RECOMPUTE_MODULE_LAYERNORM}), 0);
  const LayerNodes mlp = layer_nodes(
      resolve("llama3-8b", 2, {pb::RECOMPUTE_MODULE_LAYERNORM, pb::RECOMPUTE_MODULE_MLP}), 0);
  EXPECT_EQ(plain.rerun.size(), 2u);  // the two block norms
  ASSERT_EQ(mlp.rerun.size(), 5u);
  for (const char* op : {"mlp.up", "mlp.act", "mlp.down"}) {
    EXPECT_GT(mlp.rerun.at(op), 0) << op;
    EXPECT_DOUBLE_EQ(mlp.rerun.at(op), mlp.forward.at(op)) << op;
  }
  EXPECT_EQ(mlp.backward_collectives.size(), plain.backward_collectives.size() + 2);
  EXPECT_EQ(count_with(mlp.backward_collectives, "mlp.norm.all_gather") -
                count_with(plain.backward_collectives, "mlp.norm.all_gather"),
            1u);
  EXPECT_EQ(count_with(mlp.backward_collectives, "mlp.down.reduce_scatter"), 1u);
  // Named in the recompute phase, as full recomputation's and the executor's re-runs are.
  EXPECT_EQ(count_with(mlp.backward_collectives, "L0.mb0.rcp.mlp.down.reduce_scatter"), 1u);
}

// moe: the whole MoE layer re-runs (router, routed experts), its dispatch and combine included:
// four expert all-to-alls in the layer's backward instead of two.
TEST(RecomputeModules, MoeRerunsTheLayerWithItsAllToAlls) {
  const LayerNodes plain =
      layer_nodes(resolve("mixtral-8x7b", 2, {pb::RECOMPUTE_MODULE_CORE_ATTN}), 0);
  const LayerNodes moe = layer_nodes(
      resolve("mixtral-8x7b", 2, {pb::RECOMPUTE_MODULE_CORE_ATTN, pb::RECOMPUTE_MODULE_MOE}), 0);
  for (const char* op : {"moe.router", "moe.experts.up", "moe.experts.act", "moe.experts.down"}) {
    EXPECT_GT(moe.rerun.at(op), 0) << op;
    EXPECT_DOUBLE_EQ(moe.rerun.at(op), moe.forward.at(op)) << op;
  }
  EXPECT_EQ(plain.rerun.count("moe.router"), 0u);
  EXPECT_EQ(count_with(plain.backward_collectives, "all_to_all"), 2u);
  EXPECT_EQ(count_with(moe.backward_collectives, "all_to_all"), 4u);
}

// Memory: a checkpointed dense MLP keeps its input (the up projection's, 4096 / 2 (SP) x 4096 x 2
// bytes = 16,777,216) and drops SwiGLU's input (4096 x 2 x 14336 / 2 x 2 = 117,440,512) and the
// down projection's (4096 x 14336 / 2 x 2 = 58,720,256) in each layer; MLA's up-projections drop
// the query, key and value the attention core kept (4 layers, each 4096 tokens x 64 heads (128 / tp
// 2) x (192 + 192 + 128) x 2 bytes = 268,435,456).
TEST(RecomputeModules, MemoryKeepsTheModulesInputOnly) {
  const auto acts = [](const plan::ResolvedPlan& p) {
    return memory_per_stage(p)[0].activations_bytes();
  };
  const double dense =
      acts(resolve("llama3-8b", 2, {pb::RECOMPUTE_MODULE_LAYERNORM})) -
      acts(resolve("llama3-8b", 2, {pb::RECOMPUTE_MODULE_LAYERNORM, pb::RECOMPUTE_MODULE_MLP}));
  // No pipeline: one micro-batch's activations are alive at a time, 2 layers.
  EXPECT_DOUBLE_EQ(dense, 2 * (117440512.0 + 58720256.0));
  const double mla =
      acts(resolve("deepseek-v3", 4, {pb::RECOMPUTE_MODULE_LAYERNORM})) -
      acts(resolve("deepseek-v3", 4,
                   {pb::RECOMPUTE_MODULE_LAYERNORM, pb::RECOMPUTE_MODULE_MLA_UP_PROJ}));
  EXPECT_DOUBLE_EQ(mla, 4 * 268435456.0);
  // The routed and shared experts of a checkpointed MoE layer keep nothing but the layer's input.
  const double moe_plain = acts(resolve("deepseek-v3", 4, {pb::RECOMPUTE_MODULE_LAYERNORM}));
  const double shared = acts(resolve(
      "deepseek-v3", 4, {pb::RECOMPUTE_MODULE_LAYERNORM, pb::RECOMPUTE_MODULE_SHARED_EXPERTS}));
  const double moe =
      acts(resolve("deepseek-v3", 4, {pb::RECOMPUTE_MODULE_LAYERNORM, pb::RECOMPUTE_MODULE_MOE}));
  EXPECT_LT(shared, moe_plain);
  EXPECT_LT(moe, shared);
}

// Both engines re-run the same work and agree within 2% (one node, nothing contended), and the
// re-runs cost time in both.
TEST(RecomputeModules, DesAgreesWithAnalytic) {
  const std::vector<std::pair<std::string, pb::RecomputeModule>> cases = {
      {"llama3-8b", pb::RECOMPUTE_MODULE_MLP},
      {"mixtral-8x7b", pb::RECOMPUTE_MODULE_MOE},
      {"deepseek-v3", pb::RECOMPUTE_MODULE_MLA_UP_PROJ},
      {"deepseek-v3", pb::RECOMPUTE_MODULE_SHARED_EXPERTS}};
  for (const auto& [model, module] : cases) {
    SCOPED_TRACE(model + " " + pb::RecomputeModule_Name(module));
    const auto plain = resolve(model, 4, {pb::RECOMPUTE_MODULE_LAYERNORM});
    const auto with = resolve(model, 4, {pb::RECOMPUTE_MODULE_LAYERNORM, module});
    const topologies::Topology topology(with.cluster);
    const CostModels costs(topology, "bf16");
    const double des = simulate(with, costs, EngineKind::kDes).result.step_time_s();
    const pb::SimResult an = simulate(with, costs, EngineKind::kAnalytic).result;
    const pb::SimResult an_plain = simulate(plain, costs, EngineKind::kAnalytic).result;
    EXPECT_LT(std::abs(des - an.step_time_s()) / an.step_time_s(), 0.02)
        << des << " vs " << an.step_time_s();
    EXPECT_GT(an.breakdown().recompute_s(), an_plain.breakdown().recompute_s());
    EXPECT_GT(an.step_time_s(), an_plain.step_time_s());
  }
}

}  // namespace
}  // namespace orrery::sim
