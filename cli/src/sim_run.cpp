#include "sim_run.hpp"

#include "orrery/topologies/topology.hpp"

namespace orrery::cli {

SimulatedJob simulate_job(const LoadedJob& job, sim::EngineKind engine,
                          const pb::CalibrationProfile* calibration,
                          const sim::DesOptions& options) {
  SimulatedJob out{plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where), {}};
  const topologies::Topology topology(out.plan.cluster);
  const sim::CostModels costs(topology, out.plan.precision.dtype, calibration);
  out.output = sim::simulate(out.plan, costs, engine, options);
  return out;
}

}  // namespace orrery::cli
