#include "orrery/sim/cost_models.hpp"

#include <utility>

#include "orrery/topologies/stragglers.hpp"

namespace orrery::sim {

CostModels::CostModels(const topologies::Topology& topology, std::string dtype,
                       const pb::CalibrationProfile* calibration)
    : compute_(std::move(dtype), calibration),
      collectives_(topology, calibration),
      calibration_(calibration) {}

double CostModels::host_sharing(const plan::ResolvedPlan& plan, int64_t rank) const {
  const pb::HostSharing* h = compute_.host_sharing(plan::device_of(plan, rank));
  if (h == nullptr) return 1;
  const auto& topology = collectives_.topology();
  const int64_t node = topology.device(plan.device_of_rank[static_cast<size_t>(rank)]).node;
  int64_t ranks = 0;
  for (int64_t d : plan.device_of_rank) ranks += topology.device(d).node == node ? 1 : 0;
  return host_sharing_factor(*h, ranks);
}

double CostModels::straggler_factor(int64_t device) const {
  return topologies::compute_factor(collectives_.topology().spec(), device);
}

double CostModels::overlap_slowdown() const {
  if (calibration_ != nullptr && calibration_->overlap_compute_slowdown() > 0) {
    return calibration_->overlap_compute_slowdown();
  }
  return 1.0;
}

double CostModels::overlap_comm_slowdown() const {
  if (calibration_ != nullptr && calibration_->overlap_comm_slowdown() > 0) {
    return calibration_->overlap_comm_slowdown();
  }
  return 1.0;
}

}  // namespace orrery::sim
