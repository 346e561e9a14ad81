#include "sim_run.hpp"

#include "orrery/base/error.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::cli {

SimulatedJob simulate_job(const LoadedJob& job, sim::EngineKind engine,
                          const pb::CalibrationProfile* calibration,
                          const sim::DesOptions& options) {
  SimulatedJob out{plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where), {}};
  const topologies::Topology topology(out.plan.cluster);
  const sim::CostModels costs(topology, out.plan.precision.dtype, calibration);
  try {
    out.output = sim::simulate(out.plan, costs, engine, options);
  } catch (const sim::DesOverBudget& e) {
    // A des run over its budget is refused naming the flag that raises it.
    throw base::InputError("", 0, "--des-budget",
                           e.reason() + " (--des-budget " + std::to_string(options.max_nodes) +
                               "; raise it to run anyway, at about " +
                               std::to_string(static_cast<int>(sim::kDesBytesPerNode)) +
                               " bytes of memory per node, or use --engine analytic)");
  }
  return out;
}

}  // namespace orrery::cli
