// The transport (NicSpec.transport, docs/formats.md#transport) in both engines: a hand-checked
// collective time that each field moves, and the des engine agreeing with the analytic one on an
// uncontended data-parallel step over striped EFA NICs.
//   Ring Simple all-reduce of S bytes on 2 ranks in 2 nodes (one rank per node):
//     t = launch 4.6 us + base 37.2 us + 2 network steps x (50.5 / 2.7) x network hop
//         + S x 2(n-1)/n / (0.648 x the rank's network device), with 2(n-1)/n = 1;
//   network hop = NIC latency (half on each NIC edge) + 130 ns per switch (8 striped devices per
//   node: both nodes' devices on leaf 0 of a 64-port fat tree) + the transport's message latency.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"

namespace orrery::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
const CollectivePin kRingSimple{CollectiveAlgorithm::kRing, CollectiveProtocol::kSimple};

pb::ClusterSpec p5(int64_t nodes, double latency_s, double efficiency, int64_t nics_per_gpu) {
  pb::ClusterSpec spec = topologies::load_cluster("aws-p5", nodes);
  pb::TransportSpec& t = *spec.mutable_node_types(0)->mutable_nic()->mutable_transport();
  t.set_message_latency_s(latency_s);
  t.set_bandwidth_efficiency(efficiency);
  if (nics_per_gpu > 0) t.set_nics_per_gpu(nics_per_gpu);
  topologies::validate_cluster(spec, SourceMap());
  return spec;
}

double ring_all_reduce(const pb::ClusterSpec& spec) {
  const topologies::Topology topology(spec);
  const CollectiveCostModel model(topology);
  // GPU 0 of node 0 and GPU 0 of node 1.
  return model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, {0, 8}, kGiB, kRingSimple).seconds;
}

double expected(double hop_s, double device_bytes_per_s) {
  return 4.6e-6 + 37.2e-6 + 2 * (50.5 / 2.7) * hop_s + kGiB / (0.648 * device_bytes_per_s);
}

TEST(TransportCollective, EachFieldMovesTheHandCheckedTime) {
  // As written (InfiniBand's values): 4 x 100 Gb/s striped = 50 GB/s per GPU, hop 2.83 us:
  //   4.6 + 37.2 + 2 x 18.70 x 2.83 = 147.65 us; 1 GiB / 32.4 GB/s = 33.140 ms.
  EXPECT_NEAR(ring_all_reduce(p5(2, 0, 1, 0)), expected(2.83e-6, 50e9), 1e-12);
  // Half the efficiency halves the device: 1 GiB / 16.2 GB/s = 66.28 ms.
  EXPECT_NEAR(ring_all_reduce(p5(2, 0, 0.5, 0)), expected(2.83e-6, 25e9), 1e-12);
  // 10 us per message: each network step pays it, 2 x 18.70 x 10 us = 374 us more.
  EXPECT_NEAR(ring_all_reduce(p5(2, 10e-6, 1, 0)), expected(12.83e-6, 50e9), 1e-12);
  // No striping: the GPU reaches the network through one 100 Gb/s NIC (12.5 GB/s), 4x slower;
  // 32 devices per node now fill a 32-port leaf each, so the route climbs leaf, spine, leaf:
  // hop 2.7 + 3 x 0.13 = 3.09 us.
  EXPECT_NEAR(ring_all_reduce(p5(2, 0, 1, 1)), expected(3.09e-6, 12.5e9), 1e-12);
}

struct Case {
  std::unique_ptr<topologies::Topology> topology;
  std::unique_ptr<CostModels> costs;
  plan::ResolvedPlan plan;
};

// llama3-8b with tp 8 inside each p5 node and dp 2 across two: each GPU's gradient all-reduce
// goes through its own striped EFA device, so no two flows share a NIC link.
Case dp_across_nodes(const pb::ClusterSpec& cluster) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("aws-p5");
  p.mutable_job()->set_global_batch_size(4);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(8);
  p.mutable_parallel()->set_dp(2);
  p.set_micro_batch_size(1);
  Case c;
  c.plan = plan::resolve_plan(p, models::load_model("llama3-8b"), cluster);
  c.topology = std::make_unique<topologies::Topology>(c.plan.cluster);
  c.costs = std::make_unique<CostModels>(*c.topology, c.plan.precision.dtype);
  return c;
}

double relative(double a, double b) { return std::abs(a - b) / b; }

TEST(TransportEngines, DesAgreesWithAnalyticAndBothFeelTheTransport) {
  const Case fast = dp_across_nodes(p5(2, 0, 1, 0));
  const Case slow = dp_across_nodes(p5(2, 10e-6, 0.25, 0));
  const double fast_analytic = simulate_analytic(fast.plan, *fast.costs).result.step_time_s();
  const double slow_analytic = simulate_analytic(slow.plan, *slow.costs).result.step_time_s();
  const double fast_des = simulate_des(fast.plan, *fast.costs).result.step_time_s();
  const double slow_des = simulate_des(slow.plan, *slow.costs).result.step_time_s();
  EXPECT_LT(relative(fast_des, fast_analytic), 0.02) << fast_des << " vs " << fast_analytic;
  EXPECT_LT(relative(slow_des, slow_analytic), 0.02) << slow_des << " vs " << slow_analytic;
  // A quarter of the bandwidth and 10 us per message make the exposed gradient all-reduce
  // slower in both engines.
  EXPECT_GT(slow_analytic, fast_analytic);
  EXPECT_GT(slow_des, fast_des);
}

}  // namespace
}  // namespace orrery::sim
