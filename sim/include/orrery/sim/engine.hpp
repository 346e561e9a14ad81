// The simulator's two engines behind one interface:
//   analytic  closed form over the per-layer programs and the pipeline schedule: microseconds to
//             milliseconds per plan, for search; no contention between concurrent transfers.
//   des       SimGrid discrete-event simulation of the lowered graph on the topology's links:
//             flows of concurrent collectives contend.
// Both cost ops with the same compute and collective models, so on a contention-free case they
// agree (tests/sim/engines_agree_test.cpp).
#pragma once

#include <string>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/sim_result.pb.h"
#include "orrery/sim/collective_cost.hpp"
#include "orrery/sim/compute_cost.hpp"
#include "orrery/sim/resolved_plan.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

enum class EngineKind { kAnalytic, kDes };
const char* to_string(EngineKind kind);

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
  double host_sharing(const ResolvedPlan& plan, int64_t rank) const;

 private:
  ComputeCostModel compute_;
  CollectiveCostModel collectives_;
  const pb::CalibrationProfile* calibration_;
};

struct SimOutput {
  pb::SimResult result;
  // des: the simulated ranks' graphs with start_s and duration_s on every node (the timeline).
  pb::ExecGraph timeline;
};

// Analytic: closed form. Throws InputError only through plan resolution (done by the caller).
SimOutput simulate_analytic(const ResolvedPlan& plan, const CostModels& costs);

// Fills tokens/s, MFU and HFU from step time and the plan (shared by both engines).
void fill_throughput(const ResolvedPlan& plan, double recompute_flops_per_step, pb::SimResult& r);

}  // namespace orrery::sim
