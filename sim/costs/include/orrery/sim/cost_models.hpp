// The cost models every engine (and validate, and calibrate) prices ops with: compute and
// collectives for one (cluster, calibration), plus the calibrated slowdowns that the engines apply
// where compute and communication overlap or ranks share a host.
#pragma once

#include <cstdint>
#include <string>

#include "orrery/pb/calibration.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

// What the engines cost ops with; built once per (cluster, calibration) and shared by all plans
// evaluated on it.
class CostModels {
 public:
  CostModels(const topologies::Topology& topology, std::string dtype,
             const pb::CalibrationProfile* calibration = nullptr);
  const topologies::Topology& topology() const { return collectives_.topology(); }
  const ComputeCostModel& compute() const { return compute_; }
  const CollectiveCostModel& collectives() const { return collectives_; }
  const pb::CalibrationProfile* calibration() const { return calibration_; }
  // Compute slows by this factor while communication overlaps it (1 = none).
  double overlap_slowdown() const;
  // Communication slows by this factor while a member of its group computes beside it (1 = none).
  double overlap_comm_slowdown() const;
  // Compute of rank `rank` slows by this factor because the plan puts other ranks on its host
  // (ComputeCostModel::host_sharing of its device; 1 without one). Both engines and validate
  // multiply every compute op of the rank by it.
  double host_sharing(const plan::ResolvedPlan& plan, int64_t rank) const;
  // Compute of global device `device` takes this many times as long: the cluster's GPU
  // stragglers (ClusterSpec.stragglers; 1 without one). Only the des engine applies it.
  double straggler_factor(int64_t device) const;

 private:
  ComputeCostModel compute_;
  CollectiveCostModel collectives_;
  const pb::CalibrationProfile* calibration_;
};

}  // namespace orrery::sim
