// Alpha-beta costs of NCCL's algorithms, structured the way NCCL's tuner models them
// (src/graph/tuning.cc): per (algorithm, protocol) a latency = base + steps x per-hop latency and
// a bandwidth = link bandwidth x protocol efficiency; the tuner runs the fastest.
//
// Where the numbers come from. "NCCL" means NCCL's tuning tables (the hardware latency and
// protocol factors of src/graph/tuning.cc); per-hop latencies are expressed as multiples of the
// topology's own hop latency, normalised by NCCL's LL values (NVLink 0.6 us, network 2.7 us), so
// that a cluster spec with NCCL's latencies reproduces NCCL's table. "fit" means fitted once,
// globally, to the 22 nccl-tests tables of shared/validation/public_collectives.json (coordinate
// search minimising the median absolute relative error of the time over all 580 rows;
// docs/collectives.md has the per-table result).
#include "orrery/sim/collective_algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "orrery/base/error.hpp"

namespace orrery::sim::detail {
namespace {

// --- bandwidth -------------------------------------------------------------------------------
// Fraction of its NVSwitch link a device's ring (and an all-to-all's in-island share) sustains
// where the bus bandwidth has levelled off: B200 8-GPU all-gather and all-to-all 672-673 of
// 900 GB/s (0.747), A100 8-GPU all-reduce 231 of 300 (0.77), public tables at 1-16 GiB; the
// lower, rounded. It was 0.69, the figure below fitted over every size, which left every ring on
// NVSwitch 6-17% slow at 1 GiB and beyond; the H100 tables of validation/data, never fitted on,
// level off at 0.77-0.80 (all-to-all, all-gather).
constexpr double kNvswitchRingFraction = 0.75;
// The same on other fabrics (an Infinity Fabric or NVLink mesh, PCIe, host memory), and what one
// peer-to-peer copy sustains of its link there (fit over every size of the public tables; no
// public table has such a fabric, so nothing moved it).
constexpr double kLinkFraction = 0.69;
// NVLS all-reduce algorithm bandwidth as a fraction of the device's NVLink bandwidth (fit:
// H100 274 of 450 GB/s, B200 481 of 900 GB/s at 8-16 GiB).
constexpr double kNvlsLinkFraction = 0.556;
// Fraction of the NICs' line rate that rings, trees and NVLS trees sustain (fit: NDv4 ring
// busbw 128 of 200 GB/s per node, B200 ring all-gather 308 and NVLS-tree 383 of 400 GB/s).
constexpr double kNetworkFraction = 0.648;
// Fraction of a NIC's line rate one peer-to-peer stream sustains (fit: B200 send/recv 19.6 and
// all-to-all 22.6 of 50 GB/s per NIC).
constexpr double kP2pNetworkFraction = 0.414;
// NCCL's point-to-point path inside an NVSwitch island (src/enqueue.cc, src/graph/paths.cc,
// src/init.cc; read, not copied): a transfer is split over channels, each a thread block copying
// at a fixed rate, and how many depends on the size and the communicator. A pool of 32 p2p
// channels, at most 32 per peer; the per-peer count is halved until count x ranks fits the pool;
// NVLink chunks of 512 KiB (128 KiB when the communicator spans nodes), a part per channel of at
// least chunk/8 (chunk/2 across nodes), and channels doubled while a part exceeds 32 chunks (one
// chunk across nodes). nccl-tests' send/recv shows the steps: 8 H100s or B200s move 32-64 MiB on
// 4 channels, 128 MiB on 8, 256 MiB on 16, 512 MiB on 32, each step doubling the bandwidth.
constexpr int kP2pChannelPool = 32;
constexpr double kP2pNvlChunkBytes = 512.0 * 1024;
constexpr double kP2pNetChunkBytes = 128.0 * 1024;
// NCCL packs at most 8 peers' transfers into one batch of work (NCCL_MAX_DEV_WORK_P2P_PER_BATCH).
constexpr int64_t kP2pPeersPerBatch = 8;
// What one p2p channel copies per second (fit on the B200 send/recv table only, vultr-b200-sr-8,
// 32-256 MiB where it is channel-bound: 82.7/4, 84.7/4, 168/8, 332/16 GB/s; the H100 tables of
// validation/data, never fitted on, step at the same sizes at 20-20.5 GB/s per channel). It is
// the same on Hopper and Blackwell: a channel is a thread block, not a link.
constexpr double kP2pChannelBytesPerS = 21.0e9;
// What a p2p copy reaches of an NVLink device link once enough channels run: NCCL's topology
// model rates an NVLink at 20 of 25 GB/s (Ampere), 20.6 of 25 (Hopper) and 40.1 of 50
// (Blackwell) per direction (src/graph/topo.h): 0.80-0.82; the lowest, not fitted.
constexpr double kNvlinkP2pLinkFraction = 0.80;
// Protocol efficiencies (NCCL): LL moves 8 bytes of data per 16-byte line and NCCL rates its
// ring LL at 1/4 of the link for all-reduce and multi-node (1/3 otherwise); LL128 carries 120
// of 128 bytes (0.92); tree all-reduce runs at 0.9 x 1/2 of the ring's bus bandwidth.
constexpr double kLlAllReduceEfficiency = 1.0 / 4.0;
constexpr double kLlOtherEfficiency = 1.0 / 3.0;
constexpr double kLl128Efficiency = 0.92;
constexpr double kTreeEfficiency = 0.9 * 0.5;
// Ceilings on the bus bandwidth LL and LL128 reach, whatever the links (NCCL caps both, per
// GPU generation; here one global fit: 131 and 52.5 GB/s).
constexpr double kLlMaxBytesPerS = 131.3e9;
constexpr double kLl128MaxBytesPerS = 52.5e9;

// --- latency ---------------------------------------------------------------------------------
// Every NCCL call as nccl-tests times it: kernel launch and completion (fit: 4.6 us).
constexpr double kLaunchOverheadS = 4.6e-6;
// Base latency per algorithm and protocol, in the order LL, LL128, Simple (NCCL: ring 6.6,
// 14.0, -; tree 6.8, 14.0, 8.4; ring Simple fit 37.2 us; NVLS fit 40.9 us against NCCL's 25).
constexpr double kRingBaseS[3] = {6.6e-6, 14.0e-6, 37.2e-6};
constexpr double kTreeBaseS[3] = {6.8e-6, 14.0e-6, 8.4e-6};
constexpr double kNvlsBaseS = 40.9e-6;
// Per-step latency as a multiple of the group's hop latency. Ring in-island: LL fit 0.93 us
// (NCCL 0.6), LL128 NCCL 1.9 us, Simple fit 2.2 us (NCCL 3.4); all over NCCL's 0.6 us NVLink hop.
constexpr double kRingIntraStepHops[3] = {0.93 / 0.6, 1.9 / 0.6, 2.2 / 0.6};
// Ring network step: LL NCCL 2.7 us, LL128 NCCL 4.0 us, Simple fit 50.5 us; over NCCL's 2.7 us.
constexpr double kRingNetworkStepHops[3] = {2.7 / 2.7, 4.0 / 2.7, 50.5 / 2.7};
// Tree in-island step (NCCL: 0.6, 1.25, 4.0 us) and network step (LL fit 9.1 us, NCCL 5.0;
// LL128 NCCL 8.5 us; Simple NCCL 14 us).
constexpr double kTreeIntraStepHops[3] = {0.6 / 0.6, 1.25 / 0.6, 4.0 / 0.6};
constexpr double kTreeNetworkStepHops[3] = {9.1 / 2.7, 8.5 / 2.7, 14.0 / 2.7};
// NCCL slows LL's in-island steps by 1.8x when the collective also crosses the network.
constexpr double kLlMultiNodeIntraSlowdown = 1.8;
// Peer-to-peer: a fixed cost per call on top of the hop latency (fit: 4.9 us), and the network
// hop counted 1.67 times (fit: 4.5 us over NCCL's 2.7 us).
constexpr double kP2pBaseS = 4.9e-6;
constexpr double kP2pNetworkHops = 4.5 / 2.7;

// --- RCCL's MSCCL all-pairs all-reduce (8 AMD GPUs on one full mesh) -------------------------
// RCCL hands every all-reduce to MSCCL first and runs the first algorithm file whose rank count,
// size window and in/out-of-place flag fit, with no tuner involved; only then its own
// ring/tree (ROCm/rccl src/misc/msccl/msccl_lifecycle.cc: mscclEnqueueCheck and the internal
// scheduler's selection). The windows of the out-of-place 8-rank all-pairs files nccl-tests'
// out-of-place columns time (tools/msccl-algorithms/allreduce-allpairs-8n-ll-32tb-op.xml,
// -ll-64tb-op.xml, -simple-op.xml, ROCm/rccl as of its October 2024 tree): LL on 4 channels up to
// 64 KiB, LL on 8 channels to 512 KiB - 1, Simple on 8 channels from 512 KiB to 16 MiB. A file
// also needs the element count to be a multiple of its chunks per loop (256, 512, 512); the
// model has no element type and takes 4-byte elements (float32, what rccl-tests times).
// The in-place files differ only in leaving 11-14 MiB to the ring (-simple.xml ends at
// 11534336, -simple_2.xml starts at 14680065); not modelled.
struct MscclWindow {
  double min_bytes;
  double max_bytes;
  int protocol;  // index into kProtocols
  int channels;
  double chunks_per_loop;
};
constexpr MscclWindow kMscclAllPairsWindows[3] = {
    {0, 65536, 0, 4, 256}, {65537, 524287, 0, 8, 512}, {524288, 16777216, 2, 8, 512}};
constexpr double kMscclElementBytes = 4;
// Latency: the two steps of an all-pairs schedule (every rank sends its peers' parts at once,
// then the reduced part back) at the ring's per-step latency and base of the protocol, NCCL's
// structure with 2 steps instead of a ring's 2(n-1). LL takes the ring's LL values (base NCCL
// 6.6 us, step 0.93 us per 0.6 us hop, the global fit). Simple takes NCCL's own (base 8.4 us,
// step 3.4 us per 0.6 us hop), not the ring's fitted 37.2 / 2.2 us, which absorb the slow
// channel ramp of NVIDIA rings at mid sizes that a fixed-channel MSCCL schedule does not have.
// Chosen with the MI300X table in view (docs/collectives.md): in-sample.
constexpr double kMscclSimpleBaseS = 8.4e-6;
constexpr double kMscclSimpleStepHops = 3.4 / 0.6;
constexpr int64_t kMscclAllPairsSteps = 2;
// Bandwidth: every rank sends 2(n-1)/n of the buffer, spread over its n-1 links, as a ring does
// over all of them; LL at the ring's LL rate. Simple sustains 0.50 of the mesh (bus bandwidth),
// fit on the one MI300X table's MSCCL Simple rows (hiso-aac8-mi300x-ar-8, 1-16 MiB: 226 of 448
// GB/s), below the ring's 0.70 at 1 GiB and beyond; no RCCL constant gives it.
constexpr double kMscclSimpleLinkFraction = 0.50;

constexpr CollectiveProtocol kProtocols[3] = {CollectiveProtocol::kLL, CollectiveProtocol::kLL128,
                                              CollectiveProtocol::kSimple};
constexpr double kInfinity = std::numeric_limits<double>::infinity();

double protocol_bandwidth(int p, double bus_bytes_per_s, bool ll_all_reduce_rate) {
  switch (p) {
    case 0:
      return std::min(
          kLlMaxBytesPerS,
          bus_bytes_per_s * (ll_all_reduce_rate ? kLlAllReduceEfficiency : kLlOtherEfficiency));
    case 1:
      return std::min(kLl128MaxBytesPerS, bus_bytes_per_s * kLl128Efficiency);
    default:
      return bus_bytes_per_s;
  }
}

double ring_link_fraction(const CollectiveGroup& g) {
  return g.nvswitch ? kNvswitchRingFraction : kLinkFraction;
}

double log2_ceil(int64_t n) { return std::ceil(std::log2(static_cast<double>(n))); }

// Bus bandwidth of a ring (and a tree's links): every rank's NVLink share, and where the ring
// leaves an island, the island's NICs.
double ring_bus_bandwidth(const CollectiveGroup& g) {
  const double intra =
      g.ranks_per_island > 1 ? g.intra_rank_bytes_per_s * ring_link_fraction(g) : kInfinity;
  const double network = g.islands > 1 ? g.island_nic_bytes_per_s * kNetworkFraction : kInfinity;
  return std::min(intra, network);
}

int network_channels(const CollectiveGroup& g) {
  if (g.islands == 1 || g.pair_nic_bytes_per_s <= 0) return 1;
  return std::max(1,
                  static_cast<int>(std::lround(g.island_nic_bytes_per_s / g.pair_nic_bytes_per_s)));
}

void add_ring(pb::CollectiveKind kind, const CollectiveGroup& g, double bytes,
              std::vector<CollectiveCandidate>& out) {
  const int64_t n = g.ranks;
  const bool all_reduce = kind == pb::COLLECTIVE_KIND_ALL_REDUCE;
  const bool rooted = kind == pb::COLLECTIVE_KIND_BROADCAST || kind == pb::COLLECTIVE_KIND_REDUCE;
  // Steps a chunk takes around the ring, and how many of them cross the network.
  const int64_t steps = all_reduce ? 2 * (n - 1) : rooted ? n - 1 : n - 1;
  const int64_t network_steps = all_reduce ? 2 * (g.islands - 1) : g.islands - 1;
  const double bus = ring_bus_bandwidth(g);
  for (int p = 0; p < 3; ++p) {
    double intra_step = kRingIntraStepHops[p] * g.intra_hop_latency_s;
    if (p == 0 && g.islands > 1) intra_step *= kLlMultiNodeIntraSlowdown;
    CollectiveCandidate c;
    c.algorithm = CollectiveAlgorithm::kRing;
    c.protocol = kProtocols[p];
    c.latency_s =
        kRingBaseS[p] + static_cast<double>(steps - network_steps) * intra_step +
        static_cast<double>(network_steps) * kRingNetworkStepHops[p] * g.network_hop_latency_s;
    const double factor = bus_factor(kind, n);
    c.bandwidth_bytes_per_s = protocol_bandwidth(p, bus, all_reduce || g.islands > 1) / factor;
    c.bytes = bytes;
    c.wire_bytes_per_rank = bytes * factor;
    c.channels = network_channels(g);
    out.push_back(c);
  }
}

// Double binary tree across islands, a chain inside each (all-reduce only).
void add_tree(const CollectiveGroup& g, double bytes, std::vector<CollectiveCandidate>& out) {
  const double bus = ring_bus_bandwidth(g);
  for (int p = 0; p < 3; ++p) {
    CollectiveCandidate c;
    c.algorithm = CollectiveAlgorithm::kTree;
    c.protocol = kProtocols[p];
    c.latency_s = kTreeBaseS[p] +
                  2 * (static_cast<double>(g.ranks_per_island - 1) * kTreeIntraStepHops[p] *
                           g.intra_hop_latency_s +
                       log2_ceil(g.islands) * kTreeNetworkStepHops[p] * g.network_hop_latency_s);
    c.bandwidth_bytes_per_s = protocol_bandwidth(p, bus, true) * kTreeEfficiency;
    c.bytes = bytes;
    c.wire_bytes_per_rank = 2 * bytes;
    c.channels = network_channels(g);
    out.push_back(c);
  }
}

// NVLS: the NVSwitch reduces and multicasts; across islands an NVLS tree (Simple only).
void add_nvls(const CollectiveGroup& g, double bytes, std::vector<CollectiveCandidate>& out) {
  CollectiveCandidate c;
  c.algorithm = CollectiveAlgorithm::kNvls;
  c.protocol = CollectiveProtocol::kSimple;
  c.latency_s = kNvlsBaseS;
  double bw = g.intra_pair_bytes_per_s * kNvlsLinkFraction;
  if (g.islands > 1) {
    c.latency_s += 2 * log2_ceil(g.islands) * kTreeNetworkStepHops[2] * g.network_hop_latency_s;
    bw = std::min(bw, g.island_nic_bytes_per_s * kNetworkFraction);
  }
  c.bandwidth_bytes_per_s = bw;
  c.bytes = bytes;
  c.wire_bytes_per_rank = bytes;
  c.channels = network_channels(g);
  out.push_back(c);
}

// RCCL's MSCCL all-pairs all-reduce on a full mesh: a candidate per file, which preempts the
// tuner where the call fits the file's window (bytes = 0, a barrier, fits none).
void add_msccl_all_pairs(const CollectiveGroup& g, double bytes,
                         std::vector<CollectiveCandidate>& out) {
  const double factor = bus_factor(pb::COLLECTIVE_KIND_ALL_REDUCE, g.ranks);
  const auto steps = static_cast<double>(kMscclAllPairsSteps);
  for (const MscclWindow& w : kMscclAllPairsWindows) {
    const int p = w.protocol;
    CollectiveCandidate c;
    c.algorithm = CollectiveAlgorithm::kAllPairs;
    c.protocol = kProtocols[p];
    if (p == 2) {
      c.latency_s = kMscclSimpleBaseS + steps * kMscclSimpleStepHops * g.intra_hop_latency_s;
      c.bandwidth_bytes_per_s = g.intra_rank_bytes_per_s * kMscclSimpleLinkFraction / factor;
    } else {
      c.latency_s = kRingBaseS[p] + steps * kRingIntraStepHops[p] * g.intra_hop_latency_s;
      c.bandwidth_bytes_per_s =
          protocol_bandwidth(p, g.intra_rank_bytes_per_s * kLinkFraction, true) / factor;
    }
    c.bytes = bytes;
    c.wire_bytes_per_rank = bytes * factor;
    c.channels = w.channels;
    const double chunk_bytes = w.chunks_per_loop * kMscclElementBytes;
    c.preempts = bytes > 0 && bytes >= w.min_bytes && bytes <= w.max_bytes &&
                 std::fmod(bytes, chunk_bytes) == 0;
    // Unpinned, only the file that holds the call matters; one candidate per protocol for pins.
    const bool duplicate = std::any_of(out.begin(), out.end(), [&](const auto& o) {
      return o.algorithm == CollectiveAlgorithm::kAllPairs && o.protocol == c.protocol;
    });
    if (!duplicate) {
      out.push_back(c);
    } else if (c.preempts) {
      for (auto& o : out) {
        if (o.algorithm == CollectiveAlgorithm::kAllPairs && o.protocol == c.protocol) o = c;
      }
    }
  }
}

// All-to-all as NCCL runs it: every rank sends bytes/n to each peer at once; the peers in its
// island over NVLink, the others through its share of the node's NICs.
CollectiveCandidate direct_all_to_all(const CollectiveGroup& g, double bytes) {
  const auto n = static_cast<double>(g.ranks);
  const double intra_bytes = static_cast<double>(g.ranks_per_island - 1) / n * bytes;
  const double network_bytes = static_cast<double>(g.ranks - g.ranks_per_island) / n * bytes;
  const double intra_s =
      intra_bytes > 0 ? intra_bytes / (g.intra_rank_bytes_per_s * ring_link_fraction(g)) : 0;
  const double network_s =
      network_bytes > 0 ? network_bytes / (g.rank_nic_bytes_per_s * kP2pNetworkFraction) : 0;
  CollectiveCandidate c;
  c.algorithm = CollectiveAlgorithm::kDirect;
  c.protocol = CollectiveProtocol::kSimple;
  c.latency_s = kP2pBaseS + g.intra_hop_latency_s +
                (g.islands > 1 ? kP2pNetworkHops * g.network_hop_latency_s : 0);
  const double seconds = std::max(intra_s, network_s);
  c.bandwidth_bytes_per_s = seconds > 0 ? bytes / seconds : kInfinity;
  c.bytes = bytes;
  c.wire_bytes_per_rank = network_bytes > 0 ? network_bytes : intra_bytes;
  c.channels = 1;
  return c;
}

}  // namespace

double CollectiveCandidate::seconds() const {
  return bytes > 0 ? latency_s + bytes / bandwidth_bytes_per_s : latency_s;
}

double launch_overhead_s() { return kLaunchOverheadS; }

double bus_factor(pb::CollectiveKind kind, int64_t ranks) {
  const auto n = static_cast<double>(ranks);
  switch (kind) {
    case pb::COLLECTIVE_KIND_ALL_REDUCE:
      return 2 * (n - 1) / n;
    case pb::COLLECTIVE_KIND_ALL_GATHER:
    case pb::COLLECTIVE_KIND_REDUCE_SCATTER:
    case pb::COLLECTIVE_KIND_ALL_TO_ALL:
      return (n - 1) / n;
    default:
      return 1;
  }
}

std::vector<CollectiveCandidate> collective_candidates(pb::CollectiveKind kind,
                                                       const CollectiveGroup& group, double bytes) {
  std::vector<CollectiveCandidate> out;
  switch (kind) {
    case pb::COLLECTIVE_KIND_ALL_REDUCE:
    case pb::COLLECTIVE_KIND_BARRIER:
      add_ring(pb::COLLECTIVE_KIND_ALL_REDUCE, group, bytes, out);
      if (group.islands > 1) add_tree(group, bytes, out);
      if (group.nvls) add_nvls(group, bytes, out);
      if (group.msccl_all_pairs && kind == pb::COLLECTIVE_KIND_ALL_REDUCE) {
        add_msccl_all_pairs(group, bytes, out);
      }
      break;
    case pb::COLLECTIVE_KIND_ALL_GATHER:
    case pb::COLLECTIVE_KIND_REDUCE_SCATTER:
    case pb::COLLECTIVE_KIND_BROADCAST:
    case pb::COLLECTIVE_KIND_REDUCE:
      add_ring(kind, group, bytes, out);
      break;
    case pb::COLLECTIVE_KIND_ALL_TO_ALL:
      out.push_back(direct_all_to_all(group, bytes));
      break;
    default:
      ORRERY_CHECK(false, "collective kind " + std::to_string(static_cast<int>(kind)) +
                              " has no cost model");
  }
  return out;
}

int nvlink_p2p_channels(double bytes, const P2pCommunicator& communicator) {
  const int64_t ranks = std::max<int64_t>(2, communicator.ranks);
  int per_peer = kP2pChannelPool;
  if (communicator.multi_island) {
    // Across nodes every peer of a round must fit the pool.
    const int64_t rounds = (ranks + kP2pPeersPerBatch - 1) / kP2pPeersPerBatch;
    while (per_peer * rounds > kP2pChannelPool && per_peer > 1) per_peer /= 2;
  }
  int least = per_peer;
  while (static_cast<int64_t>(least) * ranks > kP2pChannelPool && least > 1) least /= 2;
  const double chunk = communicator.multi_island ? kP2pNetChunkBytes : kP2pNvlChunkBytes;
  const double min_part = communicator.multi_island ? chunk / 2 : chunk / 8;
  const double max_part = communicator.multi_island ? chunk : chunk * 32;
  int channels = static_cast<int>(std::min<double>(least, std::ceil(bytes / min_part)));
  channels = std::max(channels, 1);
  double part = std::max(min_part, std::ceil(bytes / channels));
  while (part > max_part && channels <= per_peer / 2) {
    channels *= 2;
    part = std::ceil(bytes / channels);
  }
  return channels;
}

CollectiveCandidate p2p_candidate(const CollectiveGroup& group, bool same_island, double bytes,
                                  const P2pCommunicator& communicator) {
  CollectiveCandidate c;
  c.algorithm = CollectiveAlgorithm::kDirect;
  c.protocol = CollectiveProtocol::kSimple;
  c.bytes = bytes;
  c.wire_bytes_per_rank = bytes;
  if (same_island) {
    c.latency_s = kP2pBaseS + group.intra_hop_latency_s;
    c.bandwidth_bytes_per_s = group.intra_pair_bytes_per_s * kLinkFraction;
    if (group.nvswitch) {
      c.channels = nvlink_p2p_channels(bytes, communicator);
      c.bandwidth_bytes_per_s = std::min(group.intra_pair_bytes_per_s * kNvlinkP2pLinkFraction,
                                         static_cast<double>(c.channels) * kP2pChannelBytesPerS);
    }
  } else {
    c.latency_s =
        kP2pBaseS + group.intra_hop_latency_s + kP2pNetworkHops * group.network_hop_latency_s;
    c.bandwidth_bytes_per_s = group.pair_nic_bytes_per_s * kP2pNetworkFraction;
  }
  return c;
}

}  // namespace orrery::sim::detail
