// Hand-checked numbers on small topologies; each expectation carries its arithmetic. Link
// latencies follow the construction rules: a spec latency is split over the two edges a route
// crosses (GPU-NVSwitch-GPU, GPU-PCIe switch-NIC, NIC-fabric-NIC), a mesh link carries all of
// its own, and every edge entering a fabric switch adds switch_latency_s (130 ns here).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/routing.hpp"
#include "test_paths.hpp"

namespace orrery::topologies {
namespace {

const std::string kGood = std::string(ORRERY_TEST_INPUTS) + "/topologies/good/";
constexpr double kGB = 1e9;
constexpr double kUs = 1e-6;

std::vector<int64_t> range(int64_t first, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t d = first; d < end; ++d) out.push_back(d);
  return out;
}

std::string vertex_name(const Topology& t, Vertex v) { return t.graph()[v].name; }

// Two DGX H100 nodes (preset resized): GPUs 0-7 on node 0, 8-15 on node 1.
class TopologiesTwoDgxH100 : public ::testing::Test {
 protected:
  Topology t{load_cluster("dgx-h100", 2)};
};

TEST_F(TopologiesTwoDgxH100, IntraNodePairUsesNvSwitchOnly) {
  const auto routes = ecmp_routes(t, 0, 1);
  ASSERT_EQ(routes.size(), 1u);  // the PCIe path (GPU0 and GPU1 share a PCIe switch) is not NVLink
  EXPECT_EQ(routes[0].edges.size(), 2u);             // gpu0 -> nvswitch -> gpu1
  EXPECT_DOUBLE_EQ(routes[0].latency_s, 0.6 * kUs);  // 0.3 + 0.3
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 1), 450 * kGB);
}

TEST_F(TopologiesTwoDgxH100, InterNodeSameRail) {
  const auto routes = ecmp_routes(t, 0, 8);
  // GPU0's PCIe switch carries NIC0 and NIC1 (rails 0 and 1); both reach GPU8's switch in one
  // rail-switch hop: 2 routes of gpu-pcie-nic-rail-nic-pcie-gpu.
  ASSERT_EQ(routes.size(), 2u);
  EXPECT_EQ(routes[0].edges.size(), 6u);
  // 0.5 + 0.5 (PCIe 1 us) + 1.35 + 0.13 (half the NIC's 2.7 us + the rail switch) + 1.35 + 0.5 +
  // 0.5
  EXPECT_NEAR(routes[0].latency_s, 4.83 * kUs, 1e-15);
  // min(63 GB/s PCIe, 400 Gb/s = 50 GB/s NIC)
  EXPECT_DOUBLE_EQ(routes[0].bottleneck_bytes_per_s, 50 * kGB);
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 8), 50 * kGB);
  EXPECT_EQ(vertex_name(t, boost::target(routes[0].edges[2], t.graph())), "g0.rail0");
}

TEST_F(TopologiesTwoDgxH100, InterNodeCrossRailClimbsToTheSpines) {
  // GPU10 is GPU2 of node 1, behind PCIe switch 1 with NIC2 and NIC3 (rails 2 and 3). From rail
  // 0 or 1 a route climbs to one of the pod's 32 spines: 2 source NICs x 32 spines x 2 target
  // rails = 128 routes of 8 edges. Four more have 8 edges too, crossing a host to reach a NIC on
  // the right rail (gpu0-pcie0-host-pcie1-nic2-rail2-...), but are slower and not equal-cost:
  // 0.5 + 0.5 (pcie0 -> host, host_link 1 us) + 0.5 + 0.5 + 1.48 + 1.35 + 0.5 + 0.5 = 6.33 us.
  const auto routes = ecmp_routes(t, 0, 10, 1000);
  ASSERT_EQ(routes.size(), 128u);
  EXPECT_EQ(routes[0].edges.size(), 8u);  // same rail: 6
  // 0.5 + 0.5 + 1.48 + 0.13 (leaf -> spine) + 0.13 (spine -> leaf) + 1.35 + 0.5 + 0.5
  EXPECT_NEAR(routes[0].latency_s, 5.09 * kUs, 1e-15);
  EXPECT_NEAR(routes[127].latency_s, 5.09 * kUs, 1e-15);
  EXPECT_EQ(ecmp_routes(t, 0, 10).size(), 64u);  // default cap
  // route() spreads by flow hash over the kept ECMP routes.
  EXPECT_NE(route(t, 0, 10, 0).edges[3], route(t, 0, 10, 1).edges[3]);
}

TEST_F(TopologiesTwoDgxH100, MaxFlowBetweenNodesIsEightNics) {
  // 8 NICs x 400 Gb/s = 8 x 50 GB/s; PCIe (4 switches x 2 x 63 GB/s) and the rails have more.
  EXPECT_DOUBLE_EQ(max_flow_bandwidth(t, range(0, 8), range(8, 16)), 400 * kGB);
  EXPECT_DOUBLE_EQ(bisection_bandwidth(t), 400 * kGB);
}

TEST(TopologiesNvl72, TraysOfOneDomainTalkOverNvlink) {
  const Topology t(load_cluster("gb200-nvl72", 36));  // 2 racks: trays 0-17 and 18-35
  const auto same = ecmp_routes(t, 0, 4);             // tray 0 GPU0 -> tray 1 GPU0
  ASSERT_EQ(same.size(), 1u);
  ASSERT_EQ(same[0].edges.size(), 2u);
  EXPECT_EQ(vertex_name(t, boost::target(same[0].edges[0], t.graph())), "domain0.nvswitch");
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 4), 900 * kGB);
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 71), 900 * kGB);  // last GPU of rack 0
  // Rack 1 (device 72 = tray 18 GPU0) only over the NICs: 400 Gb/s.
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 72), 50 * kGB);
  EXPECT_EQ(ecmp_routes(t, 0, 72)[0].edges.size(), 6u);  // same rail (rail 0)
}

TEST(TopologiesMesh, Mi300xPeersHaveDirectLinks) {
  const Topology t(load_cluster("mi300x", 2));
  const auto routes = ecmp_routes(t, 0, 1);
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_EQ(routes[0].edges.size(), 1u);
  EXPECT_DOUBLE_EQ(routes[0].latency_s, 0.6 * kUs);  // the whole link latency on the one edge
  EXPECT_DOUBLE_EQ(routes[0].bottleneck_bytes_per_s, 64 * kGB);
  // Across nodes: gpu-pcie-nic-leaf-nic-pcie-gpu (both nodes' 16 NICs share one 32-port leaf).
  EXPECT_EQ(ecmp_routes(t, 0, 8)[0].edges.size(), 6u);
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 8), 50 * kGB);
}

TEST(TopologiesLeafSpine, OversubscribedBisection) {
  // 4 nodes x 8 NICs x 50 GB/s; 12-port leaves, oversubscription 2: 8 down, 4 up, one node per
  // leaf. Halves: nodes 0-1 (GPUs 0-15) -> nodes 2-3. Each leaf sends at most its 4 uplinks x
  // 50 GB/s = 200 GB/s up, so 2 leaves x 200 = 400 GB/s (the 800 GB/s of NICs, halved).
  const Topology t(load_cluster(kGood + "leaf-spine-oversubscribed.yaml"));
  EXPECT_DOUBLE_EQ(bisection_bandwidth(t), 400 * kGB);
  // One node to the next: 8 NICs (400 GB/s) into 200 GB/s of leaf uplinks.
  EXPECT_DOUBLE_EQ(max_flow_bandwidth(t, range(0, 8), range(8, 16)), 200 * kGB);
  // 2 spines (4 uplinks split 2 + 2): one aggregated leaf-spine edge carries 2 x 50 GB/s.
  std::set<std::string> spines;
  for (const auto& r : ecmp_routes(t, 0, 8, 1000)) {
    spines.insert(vertex_name(t, boost::target(r.edges[3], t.graph())));
    EXPECT_DOUBLE_EQ(t.graph()[r.edges[3]].bandwidth_bytes_per_s, 100 * kGB);
  }
  EXPECT_EQ(spines, (std::set<std::string>{"spine0", "spine1"}));
}

TEST(TopologiesLeafSpine, EcmpCountIsTheSpineCount) {
  // 32 single-NIC nodes, 8-port leaves (4 down, 4 up): 8 leaves, 4 spines. Node 0 (leaf 0) to
  // node 31 (leaf 7): one route per spine.
  const Topology t(load_cluster(kGood + "leaf-spine-single-nic.yaml"));
  const auto routes = ecmp_routes(t, 0, 31);
  ASSERT_EQ(routes.size(), 4u);
  std::set<std::string> spines;
  for (const auto& r : routes) {
    EXPECT_EQ(r.edges.size(), 8u);  // gpu-pcie-nic-leaf-spine-leaf-nic-pcie-gpu
    spines.insert(vertex_name(t, boost::target(r.edges[3], t.graph())));
  }
  EXPECT_EQ(spines.size(), 4u);
  EXPECT_EQ(ecmp_routes(t, 0, 1).size(), 1u);  // same leaf
  EXPECT_EQ(ecmp_routes(t, 0, 1)[0].edges.size(), 6u);
  // Non-blocking: 16 NICs x 50 GB/s cross the middle.
  EXPECT_DOUBLE_EQ(bisection_bandwidth(t), 800 * kGB);
}

TEST(TopologiesFatTree, ThreeTierBisectionFollowsTheLeafOversubscription) {
  // 48 single-NIC nodes; 8-port leaves at 3:1 = 6 down, 2 up; pods of 8 / 2 = 4 leaves = 24
  // nodes, so the halves are the 2 pods. Pod 0 leaves send 4 x 2 x 50 = 400 GB/s up; its 2
  // aggregation switches have 4 x 50 = 200 GB/s each to the core: 400 GB/s = 24 x 50 / 3.
  const Topology t(load_cluster(kGood + "fat-tree-3-tier.yaml"));
  EXPECT_DOUBLE_EQ(bisection_bandwidth(t), 400 * kGB);
  const auto across = ecmp_routes(t, 0, 47);
  ASSERT_EQ(across.size(), 2u);  // via aggregation switch / core plane 0 or 1
  EXPECT_EQ(across[0].edges.size(), 10u);
  // 0.5 x 4 (PCIe) + 2.7 (NICs) + 0.13 x 5 (leaf, agg, core, agg, leaf)
  EXPECT_NEAR(across[0].latency_s, 5.35 * kUs, 1e-15);
  EXPECT_EQ(ecmp_routes(t, 0, 6)[0].edges.size(), 8u);  // same pod, next leaf
}

TEST(TopologiesMultiPod, CoreOversubscriptionBindsBetweenPods) {
  // 2 pods of 8 single-NIC nodes, 2 leaves and 4 pod spines each; a pod spine's downlinks (2
  // leaves x 50 GB/s) thinned 2:1 give 50 GB/s to the core: 4 x 50 = 200 GB/s between pods.
  const Topology t(load_cluster(kGood + "multi-pod.yaml"));
  EXPECT_DOUBLE_EQ(bisection_bandwidth(t), 200 * kGB);
  // Inside a pod it is non-blocking: leaf 0's 4 nodes to leaf 1's, 4 x 50 GB/s.
  EXPECT_DOUBLE_EQ(max_flow_bandwidth(t, range(0, 4), range(4, 8)), 200 * kGB);
}

TEST(TopologiesPcie, NoFabricServerRoutesThroughTheHost) {
  // L40S pairs on one PCIe switch: gpu-pcie-gpu; across switches through the host.
  const Topology t(load_cluster(kGood + "l40s-pcie.json"));
  EXPECT_EQ(ecmp_routes(t, 0, 1)[0].edges.size(), 2u);
  EXPECT_EQ(ecmp_routes(t, 0, 2)[0].edges.size(), 4u);
  EXPECT_DOUBLE_EQ(pair_bottleneck_bandwidth(t, 0, 2), 31.5 * kGB);
}

TEST(TopologiesRouting, SameDeviceHasNoRoute) {
  const Topology t(load_cluster("dgx-h100", 1));
  EXPECT_TRUE(ecmp_routes(t, 3, 3).empty());
  EXPECT_TRUE(route(t, 3, 3).edges.empty());
}

}  // namespace
}  // namespace orrery::topologies
