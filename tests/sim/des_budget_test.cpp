// DesOptions::max_nodes and des_estimate: a run whose estimate is over its budget is refused
// before anything is simulated (a symmetric run's in the engine process, on the graph it lowers
// once), naming the estimate and the budget; the estimate counts what the run
// really simulates (checked against the engine's own node count) and scales with --all-ranks
// without lowering every rank.
#include <gtest/gtest.h>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

struct Case {
  pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 4);
  plan::ResolvedPlan plan;
  topologies::Topology topology{cluster};
  CostModels costs{topology, "bf16"};
  Case() : plan(make()) {}
  plan::ResolvedPlan make() const {
    pb::Plan p;
    p.mutable_job()->set_global_batch_size(16);
    p.mutable_job()->set_seq_len(2048);
    p.mutable_job()->set_precision(pb::PRECISION_BF16);
    p.mutable_parallel()->set_tp(4);
    p.mutable_parallel()->set_pp(2);
    p.mutable_parallel()->set_dp(4);
    p.set_micro_batch_size(1);
    return plan::resolve_plan(p, models::preset("llama3-8b"), cluster);
  }
};

int64_t nodes_of(const pb::ExecGraph& g) {
  int64_t n = 0;
  for (const auto& r : g.ranks()) n += r.nodes_size();
  return n;
}

TEST(DesBudget, TheEstimateCountsTheSimulatedNodes) {
  const Case c;
  DesOptions o;
  const DesEstimate symmetric = des_estimate(c.plan, c.costs, o);
  EXPECT_EQ(symmetric.simulated_ranks, 2);
  plan::LowerOptions lo;
  lo.ranks = plan::representative_ranks(c.plan);
  EXPECT_EQ(symmetric.nodes, nodes_of(plan::lower(c.plan, lo)));
  EXPECT_DOUBLE_EQ(symmetric.memory_bytes, static_cast<double>(symmetric.nodes) * kDesBytesPerNode);
  o.all_ranks = true;
  const DesEstimate all = des_estimate(c.plan, c.costs, o);
  EXPECT_EQ(all.simulated_ranks, 32);
  EXPECT_EQ(all.nodes, nodes_of(plan::lower(c.plan)));  // the same count, without lowering all
}

TEST(DesBudget, ARunOverItsBudgetIsRefusedBeforeItStarts) {
  const Case c;
  DesOptions o;
  o.timeline = false;
  const int64_t nodes = des_estimate(c.plan, c.costs, o).nodes;
  o.max_nodes = nodes - 1;
  try {
    (void)simulate_des(c.plan, c.costs, o);
    ADD_FAILURE() << "a run over its budget was not refused";
  } catch (const DesOverBudget& e) {
    EXPECT_NE(e.reason().find(std::to_string(nodes) + " graph nodes"), std::string::npos)
        << e.reason();
    EXPECT_NE(e.reason().find("budget of " + std::to_string(nodes - 1)), std::string::npos)
        << e.reason();
  }
  o.max_nodes = nodes;  // exactly at the budget: it runs
  EXPECT_GT(simulate_des(c.plan, c.costs, o).result.step_time_s(), 0);
  o.max_nodes = 0;  // no limit
  o.all_ranks = true;
  EXPECT_GT(simulate_des(c.plan, c.costs, o).result.step_time_s(), 0);
}

// The backstop behind a misestimate: an engine that outgrows its address-space limit stops
// with DesOverBudget naming the limit and the budget (which the CLI turns into a --des-budget
// error), not a signal. The limit here is set far below what the run needs.
TEST(DesBudget, AnEngineOutOfItsMemoryLimitStopsNamingTheBudget) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "no address-space limit under AddressSanitizer (its shadow is address space)";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "no address-space limit under AddressSanitizer (its shadow is address space)";
#endif
#endif
  const Case c;
  DesOptions o;
  o.timeline = false;
  o.memory_limit_bytes = 256 * 1024;
  try {
    (void)simulate_des(c.plan, c.costs, o);
    ADD_FAILURE() << "a run past its memory limit completed";
  } catch (const DesOverBudget& e) {
    EXPECT_NE(e.reason().find("memory limit of 0.00 GiB"), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find("budget of " + std::to_string(o.max_nodes) + " nodes"),
              std::string::npos)
        << e.reason();
  }
  o.memory_limit_bytes = 0;  // the limit from the default budget: the same run completes
  EXPECT_GT(simulate_des(c.plan, c.costs, o).result.step_time_s(), 0);
}

}  // namespace
}  // namespace orrery::sim
