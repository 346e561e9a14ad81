// The collective cost model on preset clusters, each expected time derived by hand from the
// model's alpha-beta terms (constants in sim/costs/src/collective_algorithms.cpp):
//   launch 4.6 us; ring Simple base 37.2 us + 2.2 us per NVLink step (0.6 us hop x 2.2/0.6);
//   ring Simple bus bandwidth = min(0.75 x NVLink, 0.648 x the island's NICs);
//   all-to-all network share 0.414 x a rank's NIC bandwidth;
//   p2p in an NVSwitch node min(0.80 x NVLink, NCCL's channels for the size x 21 GB/s).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "orrery/sim/collective_algorithms.hpp"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/sim/collective_group.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::vector<int64_t> first_devices(int64_t n) {
  std::vector<int64_t> d(static_cast<size_t>(n));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

struct Cluster {
  explicit Cluster(const char* preset, int64_t nodes)
      : topology(topologies::load_cluster(preset, nodes)), model(topology) {}
  topologies::Topology topology;
  CollectiveCostModel model;
};

const CollectivePin kRingSimple{CollectiveAlgorithm::kRing, CollectiveProtocol::kSimple};

TEST(CollectiveCost, RingAllReduceOnOneDgxA100) {
  Cluster a100("dgx-a100", 1);
  const CollectiveCost c =
      a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, first_devices(8), kGiB, kRingSimple);
  // 2(n-1)/n x S / busbw + latency, busbw = 0.75 x 300 GB/s = 225 GB/s:
  //   2 x 7/8 x 1073741824 B / 225e9 B/s = 8.35133e-3 s
  //   latency = 4.6 + 37.2 + 14 steps x 2.2 us = 72.6 us            -> 8.42393e-3 s
  const double expected = 2.0 * 7 / 8 * kGiB / 225e9 + 72.6e-6;
  EXPECT_NEAR(c.seconds, expected, expected * 1e-9);
  EXPECT_DOUBLE_EQ(c.bytes_on_wire_per_rank, 2.0 * 7 / 8 * kGiB);
  // Unpinned, the tuner picks the same: A100 has no NVLS and Simple wins at 1 GiB.
  const CollectiveCost best =
      a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, first_devices(8), kGiB);
  EXPECT_EQ(best.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(best.protocol, CollectiveProtocol::kSimple);
  EXPECT_DOUBLE_EQ(best.seconds, c.seconds);
}

TEST(CollectiveCost, AllGatherMovesHalfTheAllReduceBytes) {
  Cluster a100("dgx-a100", 1);
  const auto devices = first_devices(8);
  const double ar =
      a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, kGiB, kRingSimple).seconds;
  const double ag =
      a100.model.estimate(pb::COLLECTIVE_KIND_ALL_GATHER, devices, kGiB, kRingSimple).seconds;
  // all-gather: 7/8 x S / 225 GB/s + 4.6 + 37.2 + 7 x 2.2 us (57.2 us); all-reduce twice the
  // bytes and 14 steps (72.6 us).
  EXPECT_NEAR(ag - 57.2e-6, (ar - 72.6e-6) / 2, 1e-12);
  EXPECT_NEAR(ag, 7.0 / 8 * kGiB / 225e9 + 57.2e-6, 1e-12);
}

TEST(CollectiveCost, OneRankOrNoBytesCostsNothing) {
  Cluster a100("dgx-a100", 1);
  EXPECT_EQ(a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, {3}, kGiB).seconds, 0);
  EXPECT_EQ(a100.model.estimate(pb::COLLECTIVE_KIND_ALL_TO_ALL, {5}, kGiB).seconds, 0);
  EXPECT_EQ(a100.model.estimate(pb::COLLECTIVE_KIND_ALL_GATHER, first_devices(8), 0).seconds, 0);
  EXPECT_EQ(a100.model.p2p_seconds(0, 1, 0), 0);
}

TEST(CollectiveCost, ProtocolFlipsFromLowLatencyToSimpleAsSizeGrows) {
  Cluster a100("dgx-a100", 1);
  const auto devices = first_devices(8);
  // 1 KiB: LL's 6.6 us base + 14 x 0.93 us beats Simple's 37.2 + 14 x 2.2 us.
  EXPECT_EQ(a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, 1024).protocol,
            CollectiveProtocol::kLL);
  // 1 GiB: LL runs at min(131 GB/s, 225/4 GB/s), Simple at 225 GB/s.
  EXPECT_EQ(a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, kGiB).protocol,
            CollectiveProtocol::kSimple);
}

TEST(CollectiveCost, TwoNodeAllReduceIsLimitedByTheNics) {
  Cluster a100("dgx-a100", 2);
  const auto devices = first_devices(16);
  const auto at = [&](double bytes) {
    return a100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, bytes, kRingSimple).seconds;
  };
  // busbw = min(0.75 x 300 GB/s NVLink, 0.648 x 8 x 25 GB/s NICs) = 129.6 GB/s; one more GiB
  // costs 2 x 15/16 x 1 GiB / 129.6e9 (the latency cancels).
  EXPECT_NEAR(at(2 * kGiB) - at(kGiB), 2.0 * 15 / 16 * kGiB / 129.6e9, 1e-12);
}

TEST(CollectiveCost, NvlsOnH100AtLargeSizesOnly) {
  Cluster h100("dgx-h100", 1);
  const auto devices = first_devices(8);
  EXPECT_TRUE(h100.model.nvls_available(devices));
  // 1 GiB: NVLS at 0.556 x 450 GB/s = 250 GB/s of algorithm bandwidth beats the ring's
  // 0.75 x 450 x 8/14 = 193 GB/s.
  const CollectiveCost big = h100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, kGiB);
  EXPECT_EQ(big.algorithm, CollectiveAlgorithm::kNvls);
  EXPECT_NEAR(big.seconds, kGiB / (0.556 * 450e9) + 4.6e-6 + 40.9e-6, 1e-12);
  // 1 KiB: NVLS's 40.9 us base loses to ring LL.
  EXPECT_NE(h100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, 1024).algorithm,
            CollectiveAlgorithm::kNvls);
  Cluster a100("dgx-a100", 1);
  EXPECT_FALSE(a100.model.nvls_available(devices));
}

// NVLS follows the device's architecture, not its name: the user's own copy of the H100 SXM on a
// DGX H100 board has it when it states hopper, and not when it states none.
TEST(CollectiveCost, NvlsFollowsTheDeviceArchitecture) {
  const auto devices = first_devices(8);
  for (const auto arch : {pb::DEVICE_ARCHITECTURE_HOPPER, pb::DEVICE_ARCHITECTURE_UNSPECIFIED}) {
    pb::ClusterSpec spec = topologies::load_cluster("dgx-h100", 1);
    pb::DeviceSpec mine = topologies::find_device(spec, "H100-SXM");
    mine.set_name("my-h100-sxm");
    mine.set_architecture(arch);
    *spec.add_devices() = mine;
    spec.mutable_node_types(0)->set_device("my-h100-sxm");
    const topologies::Topology topology(spec);
    const CollectiveCostModel model(topology);
    EXPECT_EQ(model.nvls_available(devices), arch == pb::DEVICE_ARCHITECTURE_HOPPER);
  }
}

TEST(CollectiveCost, AllToAllAcrossNodesIsNicBound) {
  Cluster h100("dgx-h100", 2);
  const auto devices = first_devices(16);
  const auto at = [&](double bytes) {
    return h100.model.estimate(pb::COLLECTIVE_KIND_ALL_TO_ALL, devices, bytes).seconds;
  };
  // Each rank sends 8/16 of its buffer to the other node through its own 400 Gb/s NIC at
  // 0.414 x 50 GB/s = 20.7 GB/s; its 7/16 for peers in the node go at 0.75 x 450 GB/s.
  EXPECT_NEAR(at(2 * kGiB) - at(kGiB), 8.0 / 16 * kGiB / 20.7e9, 1e-12);
  EXPECT_EQ(h100.model.estimate(pb::COLLECTIVE_KIND_ALL_TO_ALL, devices, kGiB).algorithm,
            CollectiveAlgorithm::kDirect);
}

TEST(CollectiveCost, PointToPointInsideAndAcrossNodes) {
  Cluster h100("dgx-h100", 2);
  // Same node, a two-rank communicator: 32 channels at 1 GiB, so the link binds:
  // 4.6 + 4.9 + 0.6 us + S / (0.80 x 450 GB/s).
  EXPECT_NEAR(h100.model.p2p_seconds(0, 1, kGiB), 10.1e-6 + kGiB / (0.80 * 450e9), 1e-12);
  // Across nodes one NIC at 0.414 x 50 GB/s.
  const double across = h100.model.p2p_seconds(0, 8, 2 * kGiB) - h100.model.p2p_seconds(0, 8, kGiB);
  EXPECT_NEAR(across, kGiB / (0.414 * 50e9), 1e-12);
}

// NCCL's p2p channel steps as nccl-tests' send/recv shows them on 8 H100s or B200s: 4 channels
// up to 64 MiB, then 8, 16, 32; a 4-rank communicator starts at 8; across nodes the parts are
// one 128 KiB chunk, so a few MiB already use every channel of the peer.
TEST(CollectiveCost, NvlinkP2pChannelsFollowNcclSplitting) {
  constexpr double kMiB = 1024.0 * 1024;
  const detail::P2pCommunicator eight{8, false};
  EXPECT_EQ(detail::nvlink_p2p_channels(32 * kMiB, eight), 4);
  EXPECT_EQ(detail::nvlink_p2p_channels(64 * kMiB, eight), 4);
  EXPECT_EQ(detail::nvlink_p2p_channels(128 * kMiB, eight), 8);
  EXPECT_EQ(detail::nvlink_p2p_channels(256 * kMiB, eight), 16);
  EXPECT_EQ(detail::nvlink_p2p_channels(512 * kMiB, eight), 32);
  EXPECT_EQ(detail::nvlink_p2p_channels(kGiB, eight), 32);
  EXPECT_EQ(detail::nvlink_p2p_channels(32 * kMiB, {4, false}), 8);
  EXPECT_EQ(detail::nvlink_p2p_channels(128 * kMiB, {4, false}), 8);
  EXPECT_EQ(detail::nvlink_p2p_channels(64 * 1024, eight), 1);
  EXPECT_EQ(detail::nvlink_p2p_channels(4 * kMiB, {16, true}), 16);

  // In the 8-rank communicator 64 and 128 MiB take the same time (16 MiB per channel), as
  // measured; 32 MiB moves at 4 x 21 GB/s.
  Cluster h100("dgx-h100", 1);
  const auto all = first_devices(8);
  EXPECT_NEAR(h100.model.p2p_seconds(0, 1, 64 * kMiB, all),
              h100.model.p2p_seconds(0, 1, 128 * kMiB, all), 1e-12);
  EXPECT_NEAR(h100.model.p2p_seconds(0, 1, 32 * kMiB, all), 10.1e-6 + 32 * kMiB / (4 * 21e9),
              1e-12);
}

// RCCL's MSCCL all-pairs all-reduce on one MI300X node (topologies/presets/clusters/mi300x.yaml:
// a full mesh, 7 links x 64 GB/s per GPU, 0.6 us per hop). Two steps, each at the protocol's
// per-step latency; every rank's 2 x 7/8 of the buffer over all 7 links (448 GB/s):
//   LL: 4.6 launch + 6.6 base + 2 x 0.93 us = 13.06 us; bus bandwidth min(131.3, 0.69 x 448 / 4
//       = 77.28) GB/s, algorithm bandwidth 77.28 / 1.75 = 44.16 GB/s;
//   Simple: 4.6 + 8.4 + 2 x 3.4 us = 19.8 us; 0.50 x 448 / 1.75 = 128 GB/s.
TEST(CollectiveCost, MscclAllPairsOnOneMi300xNode) {
  Cluster mi300x("mi300x", 1);
  const auto devices = first_devices(8);
  const auto all_reduce = [&](double bytes, const CollectivePin& pin = {}) {
    return mi300x.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, bytes, pin);
  };
  // 4 KiB, in the LL file's window (0-64 KiB): 13.06 us + 4096 B / 44.16 GB/s = 13.1528 us.
  const CollectiveCost small = all_reduce(4096);
  EXPECT_EQ(small.algorithm, CollectiveAlgorithm::kAllPairs);
  EXPECT_EQ(small.protocol, CollectiveProtocol::kLL);
  EXPECT_NEAR(small.seconds, 13.06e-6 + 4096 / 44.16e9, 1e-15);
  // 4 MiB, in the Simple file's window (512 KiB - 16 MiB): 19.8 us + 32.768 us = 52.568 us.
  const CollectiveCost mid = all_reduce(4.0 * 1024 * 1024);
  EXPECT_EQ(mid.algorithm, CollectiveAlgorithm::kAllPairs);
  EXPECT_EQ(mid.protocol, CollectiveProtocol::kSimple);
  EXPECT_NEAR(mid.seconds, 52.568e-6, 1e-12);
  EXPECT_EQ(mid.channels, 8);
  // 512 B is 128 floats, not a multiple of the LL file's 256 chunks: RCCL's ring, LL:
  // 4.6 + 6.6 + 14 x 0.93 = 24.22 us + 512 B / 44.16 GB/s.
  const CollectiveCost tiny = all_reduce(512);
  EXPECT_EQ(tiny.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_NEAR(tiny.seconds, 24.22e-6 + 512 / 44.16e9, 1e-12);
  // 32 MiB is past every file's window: the ring.
  EXPECT_EQ(all_reduce(32.0 * 1024 * 1024).algorithm, CollectiveAlgorithm::kRing);
  // Pinned, the all-pairs schedule is costed outside its window too (19.8 us + 32 MiB / 128 GB/s).
  const CollectivePin all_pairs{CollectiveAlgorithm::kAllPairs, CollectiveProtocol::kSimple};
  EXPECT_NEAR(all_reduce(32.0 * 1024 * 1024, all_pairs).seconds,
              19.8e-6 + 32.0 * 1024 * 1024 / 128e9, 1e-12);
  // Only all-reduce, only the node's 8 GPUs together, only on AMD's mesh.
  EXPECT_EQ(mi300x.model.estimate(pb::COLLECTIVE_KIND_ALL_GATHER, devices, 4096).algorithm,
            CollectiveAlgorithm::kRing);
  EXPECT_EQ(mi300x.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, first_devices(4), 4096).algorithm,
            CollectiveAlgorithm::kRing);
  Cluster two_nodes("mi300x", 2);
  EXPECT_NE(
      two_nodes.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, first_devices(16), 4096).algorithm,
      CollectiveAlgorithm::kAllPairs);
  Cluster h100("dgx-h100", 1);
  EXPECT_NE(h100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, 4096).algorithm,
            CollectiveAlgorithm::kAllPairs);
  EXPECT_ANY_THROW(h100.model.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, devices, 4096, all_pairs));
}

TEST(CollectiveCost, MonotonicInBytes) {
  for (const auto& [preset, nodes] :
       {std::pair{"dgx-a100", 1}, std::pair{"dgx-a100", 4}, std::pair{"dgx-h100", 1},
        std::pair{"dgx-h100", 2}, std::pair{"gb200-nvl72", 36}, std::pair{"mi300x", 2}}) {
    Cluster c(preset, nodes);
    const auto devices = first_devices(c.topology.num_devices());
    for (auto kind : {pb::COLLECTIVE_KIND_ALL_REDUCE, pb::COLLECTIVE_KIND_ALL_GATHER,
                      pb::COLLECTIVE_KIND_REDUCE_SCATTER, pb::COLLECTIVE_KIND_ALL_TO_ALL,
                      pb::COLLECTIVE_KIND_BROADCAST}) {
      double previous = 0;
      for (double bytes = 8; bytes <= 16 * kGiB; bytes *= 2) {
        const double t = c.model.estimate(kind, devices, bytes).seconds;
        EXPECT_GE(t, previous) << preset << " x " << nodes << " kind " << kind << " at " << bytes;
        previous = t;
      }
    }
  }
}

TEST(CollectiveCost, CalibrationReplacesExactlyTheCurveItNames) {
  const topologies::Topology topology(topologies::load_cluster("dgx-h100", 2));
  pb::CalibrationProfile profile;
  pb::CommCurve* curve = profile.add_comm();
  curve->set_scope("intra_node");
  curve->set_collective(pb::COLLECTIVE_KIND_ALL_REDUCE);
  curve->set_latency_s(10e-6);
  curve->set_bandwidth_bytes_per_s(100e9);
  const CollectiveCostModel plain(topology), calibrated(topology, &profile);
  const auto node = first_devices(8), both = first_devices(16);
  // intra-node all-reduce: 10 us + 2 x 7/8 x S / 100 GB/s.
  EXPECT_NEAR(calibrated.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, node, kGiB).seconds,
              10e-6 + 2.0 * 7 / 8 * kGiB / 100e9, 1e-12);
  EXPECT_EQ(calibrated.estimate(pb::COLLECTIVE_KIND_ALL_GATHER, node, kGiB).seconds,
            plain.estimate(pb::COLLECTIVE_KIND_ALL_GATHER, node, kGiB).seconds);
  EXPECT_EQ(calibrated.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, both, kGiB).seconds,
            plain.estimate(pb::COLLECTIVE_KIND_ALL_REDUCE, both, kGiB).seconds);
  EXPECT_EQ(calibrated.p2p_seconds(0, 1, kGiB), plain.p2p_seconds(0, 1, kGiB));
}

}  // namespace
}  // namespace orrery::sim

namespace orrery::sim {
namespace {

// The hop-latency cache the cost model passes describe_group serves the latencies it would have
// routed: every field of a group's description is the same with and without it, for groups that
// share their (first, other island) and in-island pairs and for groups that do not.
TEST(CollectiveGroupDescription, HopLatencyCacheChangesNothing) {
  const topologies::Topology topology(topologies::load_cluster("dgx-h100", 4));
  detail::HopLatencyCache cache;
  const std::vector<std::vector<int64_t>> groups = {{0, 8, 16, 24}, {0, 1, 8, 9}, {0, 8, 16},
                                                    {3, 11},        {0, 1, 2, 3}, {5, 13, 21, 29}};
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& devices : groups) {
      const detail::CollectiveGroup a = detail::describe_group(topology, devices);
      const detail::CollectiveGroup b = detail::describe_group(topology, devices, &cache);
      EXPECT_EQ(a.islands, b.islands);
      EXPECT_EQ(a.ranks_per_island, b.ranks_per_island);
      EXPECT_EQ(a.island_nic_bytes_per_s, b.island_nic_bytes_per_s);
      EXPECT_EQ(a.intra_hop_latency_s, b.intra_hop_latency_s);
      EXPECT_EQ(a.network_hop_latency_s, b.network_hop_latency_s);
      EXPECT_GT(a.network_hop_latency_s + a.intra_hop_latency_s, 0);
    }
  }
  EXPECT_FALSE(cache.empty());
  EXPECT_LT(cache.size(), 2 * groups.size());  // one entry per distinct pair, none per pass
}

}  // namespace
}  // namespace orrery::sim
