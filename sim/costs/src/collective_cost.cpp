// CollectiveCostModel: describes the group, costs every algorithm/protocol NCCL could run, keeps
// the fastest (or the pinned one), and lets a calibration profile replace the alpha-beta terms
// of a (scope, collective) it has measured.
#include "orrery/sim/collective_cost.hpp"

#include <map>
#include <mutex>
#include <unordered_map>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "measured_ratio.hpp"
#include "orrery/base/error.hpp"
#include "orrery/sim/collective_algorithms.hpp"
#include "orrery/sim/collective_group.hpp"

namespace orrery::sim {
namespace {

void check_devices(const topologies::Topology& topology, const std::vector<int64_t>& devices) {
  ORRERY_CHECK(!devices.empty(), "a collective needs at least one device");
  std::set<int64_t> seen;
  for (int64_t d : devices) {
    ORRERY_CHECK(d >= 0 && d < topology.num_devices(),
                 "device " + std::to_string(d) + " is outside the cluster's " +
                     std::to_string(topology.num_devices()) + " devices");
    ORRERY_CHECK(seen.insert(d).second,
                 "device " + std::to_string(d) + " appears twice in a group");
  }
}

bool matches(const CollectivePin& pin, const detail::CollectiveCandidate& c) {
  return (!pin.algorithm || *pin.algorithm == c.algorithm) &&
         (!pin.protocol || *pin.protocol == c.protocol);
}

const char* scope_of(const detail::CollectiveGroup& group) {
  return group.islands > 1 ? "inter_node" : "intra_node";
}

}  // namespace

const char* to_string(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::kRing:
      return "ring";
    case CollectiveAlgorithm::kTree:
      return "tree";
    case CollectiveAlgorithm::kNvls:
      return "nvls";
    case CollectiveAlgorithm::kDirect:
      return "direct";
    case CollectiveAlgorithm::kAllPairs:
      return "allpairs";
  }
  return "?";
}

const char* to_string(CollectiveProtocol p) {
  switch (p) {
    case CollectiveProtocol::kSimple:
      return "simple";
    case CollectiveProtocol::kLL:
      return "ll";
    case CollectiveProtocol::kLL128:
      return "ll128";
  }
  return "?";
}

struct CollectiveCostModel::GroupCache {
  // A hash of the whole device list: a group can hold 16,384 devices, and an ordered map's
  // lexicographic comparisons walked the long common prefixes of similar groups.
  struct DevicesHash {
    size_t operator()(const std::vector<int64_t>& v) const noexcept {
      uint64_t h = 1469598103934665603ULL;  // FNV-1a over the device ids
      for (int64_t d : v) h = (h ^ static_cast<uint64_t>(d)) * 1099511628211ULL;
      return static_cast<size_t>(h);
    }
  };
  std::mutex mutex;
  // Node-based: references to its values stay valid as it grows.
  std::unordered_map<std::vector<int64_t>, detail::CollectiveGroup, DevicesHash> groups;
  detail::HopLatencyCache latencies;
};

CollectiveCostModel::CollectiveCostModel(const topologies::Topology& topology,
                                         const pb::CalibrationProfile* calibration)
    : topology_(topology), calibration_(calibration), cache_(std::make_shared<GroupCache>()) {}

const detail::CollectiveGroup& CollectiveCostModel::group(
    const std::vector<int64_t>& devices) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  auto it = cache_->groups.find(devices);
  if (it == cache_->groups.end()) {
    check_devices(topology_, devices);  // once per distinct group
    it = cache_->groups
             .emplace(devices, detail::describe_group(topology_, devices, &cache_->latencies))
             .first;
  }
  return it->second;
}

const pb::CommCurve* CollectiveCostModel::calibrated_curve(const pb::CalibrationProfile& profile,
                                                           const std::string& scope,
                                                           pb::CollectiveKind kind) {
  for (const auto& curve : profile.comm()) {
    if (curve.scope() == scope && curve.collective() == kind) return &curve;
  }
  return nullptr;
}

const pb::CommCurve* CollectiveCostModel::calibrated(const std::string& scope,
                                                     pb::CollectiveKind kind) const {
  return calibration_ == nullptr ? nullptr : calibrated_curve(*calibration_, scope, kind);
}

CollectiveCost CollectiveCostModel::estimate(pb::CollectiveKind kind,
                                             const std::vector<int64_t>& devices, double bytes,
                                             const CollectivePin& pin) const {
  ORRERY_CHECK(!devices.empty(), "a collective needs at least one device");
  ORRERY_CHECK(bytes >= 0, "a collective cannot move a negative number of bytes");
  CollectiveCost cost;
  if (devices.size() == 1) return cost;
  const bool barrier = kind == pb::COLLECTIVE_KIND_BARRIER;
  if (bytes == 0 && !barrier) return cost;
  const detail::CollectiveGroup& group = this->group(devices);
  std::vector<detail::CollectiveCandidate> candidates =
      detail::collective_candidates(kind, group, barrier ? 0 : bytes);
  // RCCL runs an MSCCL algorithm whose size window holds the call without asking its tuner; an
  // MSCCL candidate outside its window runs only when pinned.
  const bool preempted = !pin.algorithm && std::any_of(candidates.begin(), candidates.end(),
                                                       [](const auto& c) { return c.preempts; });
  const auto end = std::remove_if(candidates.begin(), candidates.end(), [&](const auto& c) {
    if (!matches(pin, c)) return true;
    if (pin.algorithm) return false;
    return preempted ? !c.preempts : c.algorithm == CollectiveAlgorithm::kAllPairs;
  });
  ORRERY_CHECK(end != candidates.begin(), std::string("no ") +
                                              (pin.algorithm ? to_string(*pin.algorithm) : "") +
                                              "/" + (pin.protocol ? to_string(*pin.protocol) : "") +
                                              " algorithm for this collective on this group");
  const auto best = std::min_element(candidates.begin(), end, [](const auto& a, const auto& b) {
    return a.seconds() < b.seconds();
  });
  cost.seconds = detail::launch_overhead_s() + best->seconds();
  cost.algorithm = best->algorithm;
  cost.protocol = best->protocol;
  cost.channels = best->channels;
  cost.bytes_on_wire_per_rank = best->wire_bytes_per_rank;
  if (const pb::CommCurve* curve = calibrated(scope_of(group), kind)) {
    cost.seconds = curve_seconds(*curve, group.ranks, bytes);
  }
  return cost;
}

double CollectiveCostModel::curve_seconds(const pb::CommCurve& curve, int64_t ranks, double bytes) {
  return (curve.latency_s() +
          bytes * detail::bus_factor(curve.collective(), ranks) / curve.bandwidth_bytes_per_s()) *
         size_correction(curve, ranks, bytes);
}

double CollectiveCostModel::size_correction(const pb::CommCurve& curve, int64_t ranks,
                                            double bytes) {
  if (curve.size_points_size() == 0 || !(bytes > 0)) return 1.0;
  std::vector<detail::RatioPoint> points;
  for (const pb::SizePoint& p : curve.size_points()) {
    if (p.ranks() != ranks || !(p.bytes() > 0)) continue;
    points.push_back({std::abs(std::log2(bytes / p.bytes())), p.time_ratio()});
  }
  return detail::blend_ratios(points);
}

int64_t message_rounds(pb::CollectiveKind kind, int64_t ranks) {
  if (ranks < 2) return 0;
  switch (kind) {
    case pb::COLLECTIVE_KIND_ALL_REDUCE:
      return 2 * (ranks - 1);
    case pb::COLLECTIVE_KIND_ALL_GATHER:
    case pb::COLLECTIVE_KIND_REDUCE_SCATTER:
    case pb::COLLECTIVE_KIND_ALL_TO_ALL:
      return ranks - 1;
    default:
      return 1;
  }
}

double CollectiveCostModel::blocking_overhead_s(pb::CollectiveKind kind,
                                                const std::vector<int64_t>& devices) const {
  if (calibration_ == nullptr || devices.size() < 2) return 0;
  const std::string scope = scope_of(group(devices));
  for (const auto& o : calibration_->blocking_overhead()) {
    if (o.scope() != scope) continue;
    return o.overhead_s() + o.per_round_s() * static_cast<double>(message_rounds(
                                                  kind, static_cast<int64_t>(devices.size())));
  }
  return 0;
}

std::string CollectiveCostModel::calibration_scope(const std::vector<int64_t>& devices) const {
  return scope_of(group(devices));
}

bool CollectiveCostModel::nvls_available(const std::vector<int64_t>& devices) const {
  return devices.size() > 1 && group(devices).nvls;
}

double CollectiveCostModel::p2p_seconds(int64_t src_device, int64_t dst_device,
                                        double bytes) const {
  return p2p_seconds(src_device, dst_device, bytes, {src_device, dst_device});
}

double CollectiveCostModel::p2p_seconds(int64_t src_device, int64_t dst_device, double bytes,
                                        const std::vector<int64_t>& communicator) const {
  ORRERY_CHECK(bytes >= 0, "a transfer cannot move a negative number of bytes");
  if (bytes == 0) return 0;
  const detail::CollectiveGroup& group = this->group({src_device, dst_device});
  if (const pb::CommCurve* curve = calibrated(scope_of(group), pb::COLLECTIVE_KIND_UNSPECIFIED)) {
    return curve_seconds(*curve, 2, bytes);
  }
  const bool same_island =
      detail::island_of(topology_, src_device) == detail::island_of(topology_, dst_device);
  const detail::P2pCommunicator comm{static_cast<int64_t>(communicator.size()),
                                     this->group(communicator).islands > 1};
  return detail::launch_overhead_s() +
         detail::p2p_candidate(group, same_island, bytes, comm).seconds();
}

}  // namespace orrery::sim
