// What a collective or a transfer sends (FlowPlan, des_internal.hpp), for the algorithm the
// collective cost model picked:
//   ring (all-reduce, all-gather, reduce-scatter; broadcast/reduce as a chain): one ring per
//     channel, channel c entering and leaving each NVLink island at its c-th member, so that a
//     group with k members per island crosses the network on k NICs at once (NCCL's rings):
//     the island's last member hands its data to the c-th over NVLink, which sends it on
//     (NCCL's PXN), so the ring stays on one rail of a rail-optimized fabric;
//     each rank sends its bytes on the wire (bytes_on_wire_per_rank) split over the channels.
//     The steps of a ring are aggregated into one flow per neighbour pair.
//   tree (all-reduce across islands): a chain inside each island and a binary tree over the
//     islands' leaders (leader of channel c = member c), both directions, bytes / k per channel.
//   nvls: each member's round trip through its NVSwitch (in-switch reduction and multicast),
//     plus the leaders' tree across islands; bytes / k per flow (a member's round trip repeats
//     over the k channels).
//   direct (all-to-all): every ordered pair, bytes / n each.
//   transfer: one flow.
// alpha and beta come from the model itself: beta = t(2b) - t(b) with the same algorithm and
// protocol pinned (the model is affine in the size), alpha = t(b) - beta.
#include <algorithm>
#include <map>

#include "des_internal.hpp"
#include "orrery/sim/collective_group.hpp"

namespace orrery::sim::des {
namespace {

std::vector<std::vector<int32_t>> islands_of(const topologies::Topology& t,
                                             const std::vector<int64_t>& devices) {
  std::map<int64_t, size_t> index;
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    const int64_t island = detail::island_of(t, devices[i]);
    auto [it, fresh] = index.emplace(island, out.size());
    if (fresh) out.emplace_back();
    out[it->second].push_back(static_cast<int32_t>(i));
  }
  return out;
}

int32_t member(const std::vector<int32_t>& island, size_t channel) {
  return island[channel % island.size()];
}

void add_rings(const std::vector<std::vector<int32_t>>& islands, size_t channels, bool chain,
               FlowPlan& p) {
  for (size_t c = 0; c < channels; ++c) {
    std::vector<int32_t> order;
    std::vector<size_t> island_at;  // per position in `order`
    for (size_t k = 0; k < islands.size(); ++k) {
      for (size_t i = 0; i < islands[k].size(); ++i) {
        order.push_back(islands[k][(i + c) % islands[k].size()]);
        island_at.push_back(k);
      }
    }
    const size_t n = order.size();
    for (size_t i = 0; i + (chain ? 1 : 0) < n; ++i) {
      const int32_t from = order[i], to = order[(i + 1) % n];
      const int32_t entry = member(islands[island_at[i]], c);
      // Leaving its island, the ring leaves by the NIC it came in on (the entry member's, on the
      // same rail as the next island's entry member): the last member hands its data over
      // NVLink to the entry member, which sends it. This is NCCL's PXN (on by default since
      // 2.12); it keeps a ring's network hops on one rail of a rail-optimized fabric instead
      // of crossing to the neighbouring rail through the spines.
      if (island_at[(i + 1) % n] != island_at[i] && entry != from) {
        p.pairs.emplace_back(from, entry);
        p.pairs.emplace_back(entry, to);
      } else {
        p.pairs.emplace_back(from, to);
      }
    }
  }
}

void add_leader_tree(const std::vector<std::vector<int32_t>>& islands, size_t channels,
                     FlowPlan& p) {
  for (size_t c = 0; c < channels; ++c) {
    for (size_t i = 1; i < islands.size(); ++i) {
      const int32_t child = member(islands[i], c), parent = member(islands[(i - 1) / 2], c);
      p.pairs.emplace_back(child, parent);
      p.pairs.emplace_back(parent, child);
    }
  }
}

void split(double seconds, double doubled, FlowPlan& p) {
  p.beta_s = std::max(0.0, doubled - seconds);
  p.alpha_s = std::max(0.0, seconds - p.beta_s);
}

}  // namespace

FlowPlan collective_plan(const CollectiveCostModel& model, pb::CollectiveKind kind,
                         const std::vector<int64_t>& devices, double bytes) {
  FlowPlan p;
  const CollectiveCost cost = model.estimate(kind, devices, bytes);
  p.algorithm = to_string(cost.algorithm);
  p.protocol = to_string(cost.protocol);
  p.alpha_s = cost.seconds;
  if (devices.size() < 2 || bytes <= 0 || kind == pb::COLLECTIVE_KIND_BARRIER) return p;
  const CollectivePin pin{cost.algorithm, cost.protocol};
  split(cost.seconds, model.estimate(kind, devices, 2 * bytes, pin).seconds, p);
  if (p.beta_s <= 0) return p;

  const auto islands = islands_of(model.topology(), devices);
  size_t channels = 1;
  if (islands.size() > 1) {
    for (const auto& island : islands) channels = std::max(channels, island.size());
  }
  const auto n = static_cast<double>(devices.size());
  const auto k = static_cast<double>(channels);
  switch (cost.algorithm) {
    case CollectiveAlgorithm::kRing: {
      const bool chain =
          kind == pb::COLLECTIVE_KIND_BROADCAST || kind == pb::COLLECTIVE_KIND_REDUCE;
      add_rings(islands, channels, chain, p);
      p.flow_bytes = cost.bytes_on_wire_per_rank / k;
      break;
    }
    case CollectiveAlgorithm::kTree:
      for (size_t c = 0; c < channels; ++c) {
        for (const auto& island : islands) {
          for (size_t i = 0; i + 1 < island.size(); ++i) {
            p.pairs.emplace_back(island[i], island[i + 1]);
            p.pairs.emplace_back(island[i + 1], island[i]);
          }
        }
      }
      add_leader_tree(islands, channels, p);
      p.flow_bytes = bytes / k;
      break;
    case CollectiveAlgorithm::kNvls:
      for (size_t c = 0; c < channels; ++c) {
        for (size_t i = 0; i < devices.size(); ++i) p.pairs.emplace_back(i, i);
      }
      add_leader_tree(islands, channels, p);
      p.flow_bytes = bytes / k;
      break;
    case CollectiveAlgorithm::kDirect:
      for (size_t i = 0; i < devices.size(); ++i) {
        for (size_t j = 0; j < devices.size(); ++j) {
          if (i != j) p.pairs.emplace_back(i, j);
        }
      }
      p.flow_bytes = bytes / n;
      break;
    case CollectiveAlgorithm::kAllPairs:
      // RCCL's MSCCL all-pairs all-reduce: each rank sends each peer its part of the buffer
      // (reduce-scatter), then the reduced part back (all-gather).
      for (size_t i = 0; i < devices.size(); ++i) {
        for (size_t j = 0; j < devices.size(); ++j) {
          if (i != j) p.pairs.emplace_back(i, j);
        }
      }
      p.flow_bytes = 2 * bytes / n;
      break;
  }
  return p;
}

FlowPlan p2p_plan(const CollectiveCostModel& model, int64_t src_device, int64_t dst_device,
                  double bytes) {
  FlowPlan p;
  p.algorithm = "direct";
  p.protocol = "simple";
  p.alpha_s = model.p2p_seconds(src_device, dst_device, bytes);
  if (bytes <= 0 || src_device == dst_device) return p;
  split(p.alpha_s, model.p2p_seconds(src_device, dst_device, 2 * bytes), p);
  if (p.beta_s > 0) {
    p.pairs.emplace_back(0, 1);
    p.flow_bytes = bytes;
  }
  return p;
}

}  // namespace orrery::sim::des
