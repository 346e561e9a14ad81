// The des engine's inputs as one protobuf message (pb::DesJob), so that the engine can run in a
// process of its own (orrery-des): simulate_des writes the job on the helper's standard input,
// des_main.cpp reads it back into the same plan, cost models and options.
#pragma once

#include <memory>

#include "orrery/pb/des_job.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim::des {

pb::DesJob to_job(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options);

// A job made whole again. Owns everything its members point at (the topology the cost models
// keep a reference to, the calibration profile, the graph), so it never moves.
struct RebuiltJob {
  explicit RebuiltJob(pb::DesJob job);
  RebuiltJob(const RebuiltJob&) = delete;
  RebuiltJob& operator=(const RebuiltJob&) = delete;

  pb::DesJob job;
  plan::ResolvedPlan plan;
  std::unique_ptr<topologies::Topology> topology;
  std::unique_ptr<CostModels> costs;
  DesOptions options;
};

}  // namespace orrery::sim::des
