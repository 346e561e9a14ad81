// FSDP buckets: consecutive units share one gather and one reduce-scatter (bucket_bytes), moving
// the same bytes in fewer collectives, and both engines see the same buckets.
#include <gtest/gtest.h>

#include "orrery/models/model_catalog.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/lower.hpp"
#include "orrery/sim/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

ResolvedPlan fsdp_plan(double bucket_bytes) {
  pb::Plan p;
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  p.set_sharding(pb::SHARDING_FSDP);
  p.set_prefetch_buckets(1);
  p.set_bucket_bytes(bucket_bytes);
  return resolve_plan(p, models::preset("llama3-8b"), topologies::load_cluster("dgx-h100", 1));
}

struct Counted {
  int gathers = 0, reduces = 0;
  double gather_bytes = 0, reduce_bytes = 0;
};

Counted count(const ResolvedPlan& plan) {
  LowerOptions o;
  o.ranks = {0};
  const pb::ExecGraph g = lower(plan, o);
  Counted c;
  for (const auto& n : g.ranks(0).nodes()) {
    if (n.name().find("fsdp.all_gather") != std::string::npos) ++c.gathers, c.gather_bytes += n.comm_bytes();
    if (n.name().find("fsdp.reduce_scatter") != std::string::npos) ++c.reduces, c.reduce_bytes += n.comm_bytes();
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

TEST(FsdpBuckets, BiggerBucketsChangeTheAnalyticStep) {
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  const topologies::Topology topology(cluster);
  const CostModels costs(topology, "bf16");
  const double small = simulate_analytic(fsdp_plan(0), costs).result.step_time_s();
  const double large = simulate_analytic(fsdp_plan(1024.0 * 1024 * 1024), costs).result.step_time_s();
  EXPECT_GT(small, 0);
  EXPECT_NE(small, large);  // the engine reads the buckets, not only the bytes
}

}  // namespace
}  // namespace orrery::sim
