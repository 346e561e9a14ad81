// FSDP buckets: consecutive units share one gather and one reduce-scatter (bucket_bytes), moving
// the same bytes in fewer collectives, and both engines see the same buckets.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

plan::ResolvedPlan fsdp_plan(double bucket_bytes, int64_t prefetch = 1,
                             const std::string& model = "llama3-8b") {
  pb::Plan p;
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_sharding(pb::SHARDING_FSDP);
  p.set_prefetch_buckets(prefetch);
  p.set_bucket_bytes(bucket_bytes);
  return plan::resolve_plan(p, models::preset(model), topologies::load_cluster("dgx-h100", 1));
}

struct Counted {
  int gathers = 0, reduces = 0;
  double gather_bytes = 0, reduce_bytes = 0;
};

Counted count(const plan::ResolvedPlan& plan) {
  plan::LowerOptions o;
  o.ranks = {0};
  const pb::ExecGraph g = plan::lower(plan, o);
  Counted c;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.name().find("fsdp.all_gather") != std::string::npos)
      ++c.gathers, c.gather_bytes += n.comm_bytes();
    if (n.name().find("fsdp.reduce_scatter") != std::string::npos)
      ++c.reduces, c.reduce_bytes += n.comm_bytes();
  }
  return c;
}

TEST(FsdpBuckets, SameBytesInFewerCollectives) {
  // llama3-8b: embedding 525,336,576 + 32 layers x 218,112,000 + head 525,340,672 parameters.
  const Counted per_unit = count(fsdp_plan(0));
  // One micro-batch: 34 units gathered in forward and again in backward, reduced once.
  EXPECT_EQ(per_unit.gathers, 68);
  EXPECT_EQ(per_unit.reduces, 34);
  // 1 GiB buckets hold 536,870,912 bf16 parameters: {embedding, L0} (743M), then three layers
  // each (654M) for L1..L30 (10 buckets), then {L31, head}: 12 buckets, so 24 gathers and 12
  // reduce-scatters move the same bytes as 68 and 34.
  const Counted bucketed = count(fsdp_plan(1024.0 * 1024 * 1024));
  EXPECT_EQ(bucketed.gathers, 24);
  EXPECT_EQ(bucketed.reduces, 12);
  EXPECT_DOUBLE_EQ(bucketed.gather_bytes, per_unit.gather_bytes);
  EXPECT_DOUBLE_EQ(bucketed.reduce_bytes, per_unit.reduce_bytes);
  // Every parameter is gathered twice per micro-batch (forward, backward) in bf16 and reduced
  // once in fp32: 8,030,261,248 x 2 x 2 and x 4.
  EXPECT_DOUBLE_EQ(per_unit.gather_bytes, 8030261248.0 * 2 * 2);
  EXPECT_DOUBLE_EQ(per_unit.reduce_bytes, 8030261248.0 * 4);
}

// Every node name is unique within a rank: the executor times each op under its node's name
// (executor/src/op_trace.hpp), so two nodes sharing one could not be told apart. The embedding and
// the head both sit at layer -1, so their FSDP collectives carry the part's name.
TEST(FsdpBuckets, NodeNamesAreUniqueWithinARank) {
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  struct Variant {
    std::string model;
    pb::Sharding sharding;
    double bucket_bytes;
    int64_t pp;
  };
  const std::vector<Variant> variants = {
      {"llama3-8b", pb::SHARDING_FSDP, 0, 1},
      {"llama3-8b", pb::SHARDING_FSDP, 1024.0 * 1024 * 1024, 1},
      {"llama3-8b", pb::SHARDING_ZERO3, 0, 2},
      {"sc21-1.7b", pb::SHARDING_FSDP, 0, 1},
      {"sc21-1.7b", pb::SHARDING_ZERO1, 64e6, 1},
      {"sc21-1.7b", pb::SHARDING_NONE, 64e6, 2},
      {"llama3-8b", pb::SHARDING_ZERO2, 0, 1},
  };
  for (const auto& v : variants) {
    SCOPED_TRACE(v.model + " " + pb::Sharding_Name(v.sharding) + " pp " + std::to_string(v.pp));
    pb::Plan p;
    p.mutable_job()->set_global_batch_size(16);
    p.mutable_job()->set_seq_len(2048);
    p.mutable_job()->set_precision(pb::PRECISION_BF16);
    p.mutable_parallel()->set_dp(8 / v.pp);
    p.mutable_parallel()->set_pp(v.pp);
    p.set_micro_batch_size(1);
    p.set_sharding(v.sharding);
    p.set_bucket_bytes(v.bucket_bytes);
    const pb::ExecGraph g = plan::lower(plan::resolve_plan(p, models::preset(v.model), cluster));
    for (const auto& rg : g.ranks()) {
      std::set<std::string> seen;
      for (const auto& n : rg.nodes())
        EXPECT_TRUE(seen.insert(n.name()).second) << "rank " << rg.rank() << ": " << n.name();
    }
  }
}

// Tied embeddings with the head on the same rank: the LM head reads the embedding matrix, so the
// embedding's FSDP bucket stays gathered from its forward to its backward (no backward gather);
// the head's own bucket is gathered in both passes.
TEST(FsdpBuckets, TiedEmbeddingStaysGatheredUntilItsBackward) {
  pb::Plan p;
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_sharding(pb::SHARDING_FSDP);
  plan::LowerOptions o;
  o.ranks = {0};
  const pb::ExecGraph g = plan::lower(
      plan::resolve_plan(p, models::preset("sc21-1.7b"), topologies::load_cluster("dgx-h100", 1)),
      o);
  std::set<std::string> names;
  for (const auto& n : g.ranks(0).nodes()) names.insert(n.name());
  EXPECT_TRUE(names.count("mb0.fwd.embed.fsdp.all_gather"));
  EXPECT_FALSE(names.count("mb0.bwd.embed.fsdp.all_gather"));
  EXPECT_TRUE(names.count("mb0.bwd.embed.fsdp.reduce_scatter"));
  EXPECT_TRUE(names.count("mb0.fwd.head.fsdp.all_gather"));
  EXPECT_TRUE(names.count("mb0.bwd.head.fsdp.all_gather"));
  EXPECT_TRUE(names.count("mb0.bwd.head.fsdp.reduce_scatter"));
  EXPECT_TRUE(names.count("L0.mb0.bwd.fsdp.all_gather"));
}

TEST(FsdpBuckets, BiggerBucketsChangeTheAnalyticStep) {
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  const topologies::Topology topology(cluster);
  const CostModels costs(topology, "bf16");
  const double small = simulate_analytic(fsdp_plan(0), costs).result.step_time_s();
  const double large =
      simulate_analytic(fsdp_plan(1024.0 * 1024 * 1024), costs).result.step_time_s();
  EXPECT_GT(small, 0);
  EXPECT_NE(small, large);  // the engine reads the buckets, not only the bytes
}

// Layer-level checkpointing under FSDP (torchtitan's FSDP2 with selective_ac_option 2): a
// bucket is gathered again before its layer's re-run only where that layer is recomputed, and
// the engines agree on it; per layer buckets and 1 GiB buckets (whose last layer decides).
TEST(FsdpBuckets, EnginesAgreeUnderEveryNthLayerRecomputation) {
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  const topologies::Topology topology(cluster);
  const CostModels costs(topology, "bf16");
  for (const double bucket : {0.0, 1024.0 * 1024 * 1024}) {
    SCOPED_TRACE(bucket);
    plan::ResolvedPlan plan = fsdp_plan(bucket);
    plan.plan.set_recompute(pb::RECOMPUTE_FULL);
    const double none = simulate_analytic(fsdp_plan(bucket), costs).result.step_time_s();
    const double all = simulate_analytic(plan, costs).result.step_time_s();
    plan.plan.set_recompute_every(2);
    const double analytic = simulate_analytic(plan, costs).result.step_time_s();
    const double des = simulate_des(plan, costs).result.step_time_s();
    EXPECT_NEAR(des, analytic, 0.02 * analytic);
    // Half the layers re-run: between no recomputation and all of it.
    EXPECT_GT(analytic, none);
    EXPECT_LT(analytic, all);
  }
}

}  // namespace
}  // namespace orrery::sim

namespace orrery::sim {
namespace {

// FSDP2's copies: every gather is followed by a copy-out on the compute stream that the part's
// compute waits for, every reduce-scatter preceded by a copy-in of the gradients, which waits for
// the previous reduce-scatter (one in flight); each reads and writes the bucket's bytes (bf16
// parameters: 2 per parameter; fp32 gradients: 4). The optimizer waits for the last reduce-scatter.
TEST(FsdpBuckets, CopiesAroundEveryGatherAndReduceScatter) {
  plan::LowerOptions o;
  o.ranks = {0};
  const pb::ExecGraph g = plan::lower(fsdp_plan(0), o);
  const auto& nodes = g.ranks(0).nodes();
  std::map<std::string, const pb::ExecNode*> by_name;
  for (const auto& n : nodes) by_name[n.name()] = &n;
  auto depends = [](const pb::ExecNode& n, int64_t on) {
    return std::find(n.data_deps().begin(), n.data_deps().end(), on) != n.data_deps().end();
  };
  auto renamed = [](std::string name, const std::string& from, const std::string& to) {
    return name.replace(name.find(from), from.size(), to);
  };
  int copies_out = 0, copies_in = 0;
  int64_t previous_reduce = -1, optimizer = -1;
  for (const auto& n : nodes) {
    if (n.name() == "opt.adamw") optimizer = n.id();
    if (n.name().find("fsdp.all_gather") != std::string::npos) {
      const std::string copy = renamed(n.name(), "all_gather", "copy_out");
      ASSERT_TRUE(by_name.count(copy)) << copy;
      const pb::ExecNode& c = *by_name.at(copy);
      ++copies_out;
      EXPECT_EQ(c.kind(), pb::NODE_KIND_COMPUTE);
      EXPECT_EQ(c.stream(), 0);
      EXPECT_EQ(c.op_class(), pb::OP_CLASS_COPY);
      EXPECT_EQ(c.flops(), 0);
      EXPECT_DOUBLE_EQ(c.bytes_read(), n.comm_bytes()) << copy;
      EXPECT_DOUBLE_EQ(c.bytes_written(), n.comm_bytes()) << copy;
      ASSERT_EQ(c.shape_size(), 1);
      EXPECT_DOUBLE_EQ(static_cast<double>(c.shape(0)) * 2, n.comm_bytes());
      EXPECT_TRUE(depends(c, n.id())) << copy;
      // The part's first op comes right after its copy-out, on the same stream.
      ASSERT_LT(c.id() + 1, nodes.size());
      EXPECT_EQ(nodes.Get(static_cast<int>(c.id()) + 1).stream(), 0) << copy;
      EXPECT_EQ(nodes.Get(static_cast<int>(c.id()) + 1).kind(), pb::NODE_KIND_COMPUTE) << copy;
    }
    if (n.name().find("fsdp.reduce_scatter") != std::string::npos) {
      const std::string copy = renamed(n.name(), "reduce_scatter", "copy_in");
      ASSERT_TRUE(by_name.count(copy)) << copy;
      const pb::ExecNode& c = *by_name.at(copy);
      ++copies_in;
      EXPECT_EQ(c.stream(), 0);
      EXPECT_DOUBLE_EQ(c.bytes_read(), n.comm_bytes()) << copy;
      EXPECT_DOUBLE_EQ(c.bytes_written(), n.comm_bytes()) << copy;
      EXPECT_TRUE(depends(n, c.id())) << n.name();
      if (previous_reduce >= 0) EXPECT_TRUE(depends(c, previous_reduce)) << copy;
      previous_reduce = n.id();
    }
  }
  EXPECT_EQ(copies_out, 68);  // 34 units, gathered in forward and backward (one micro-batch)
  EXPECT_EQ(copies_in, 34);
  ASSERT_GE(optimizer, 0);
  EXPECT_TRUE(depends(nodes.Get(static_cast<int>(optimizer)), previous_reduce));
}

// Both engines put FSDP's gathers and reduce-scatters on one stream in the lowering's order, with
// and without prefetching, and add the copies as compute: on one uncontended node they agree.
TEST(FsdpBuckets, EnginesAgreeWithAndWithoutPrefetch) {
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  const topologies::Topology topology(cluster);
  const CostModels costs(topology, "bf16");
  struct Variant {
    std::string model;
    double bucket_bytes;
    int64_t prefetch;
  };
  // Llama 3 8B per layer and in 1 GiB buckets; SC21's 1.7B with tied embeddings (a resident
  // bucket without a backward gather).
  const std::vector<Variant> variants = {
      {"llama3-8b", 0, 0}, {"llama3-8b", 0, 1},
      {"llama3-8b", 0, 2}, {"llama3-8b", 1024.0 * 1024 * 1024, 1},
      {"sc21-1.7b", 0, 0}, {"sc21-1.7b", 0, 1}};
  for (const auto& v : variants) {
    SCOPED_TRACE(v.model + " bucket " + std::to_string(v.bucket_bytes) + " prefetch " +
                 std::to_string(v.prefetch));
    const plan::ResolvedPlan plan = fsdp_plan(v.bucket_bytes, v.prefetch, v.model);
    const double analytic = simulate_analytic(plan, costs).result.step_time_s();
    const double des = simulate_des(plan, costs).result.step_time_s();
    EXPECT_NEAR(des, analytic, 0.02 * analytic);
  }
}

}  // namespace
}  // namespace orrery::sim
