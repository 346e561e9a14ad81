// DesOptions::time_limit_s: a run past its limit is stopped (its engine process killed) and
// reported as DesTimedOut, never left running.
#include <gtest/gtest.h>

#include "orrery/models/model_catalog.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

TEST(DesTimeLimit, ARunPastItsLimitIsStopped) {
  pb::Plan p;
  p.mutable_job()->set_global_batch_size(64);
  p.mutable_job()->set_seq_len(4096);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(8);
  p.set_micro_batch_size(1);
  const auto cluster = topologies::load_cluster("dgx-h100", 1);
  const plan::ResolvedPlan plan = plan::resolve_plan(p, models::preset("llama3-8b"), cluster);
  const topologies::Topology topology(cluster);
  const CostModels costs(topology, "bf16");
  DesOptions o;
  o.timeline = false;
  o.time_limit_s = 1e-6;  // far less than forking an engine takes
  EXPECT_THROW(simulate_des(plan, costs, o), DesTimedOut);
  o.time_limit_s = 0;  // no limit: the same plan completes
  EXPECT_GT(simulate_des(plan, costs, o).result.step_time_s(), 0);
}

}  // namespace
}  // namespace orrery::sim
