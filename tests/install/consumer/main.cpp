// Simulates llama3-8b with tp 8 on one DGX H100 node (analytic engine) through the installed
// library, and prints the step time as the CLI's --json does (the shortest text that reads back
// as the same double): the ctest compares the two. Then the folders it would look for orrery's
// helper programs in, one per line: the ctest checks that the installed libexec/orrery is one
// and the build tree the package came from is none.
#include <charconv>
#include <cstdio>

#include "orrery/base/helper_programs.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/plan_defaults.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

int main() {
  using namespace orrery;
  const pb::ModelSpec model = models::load_model("llama3-8b");
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 1);
  pb::Plan plan;
  plan.mutable_job()->set_global_batch_size(8);
  plan.mutable_job()->set_seq_len(2048);
  plan.mutable_job()->set_precision(pb::PRECISION_BF16);
  plan.mutable_parallel()->set_tp(8);
  plan::fill_unstated(plan, model, cluster);  // micro-batch 1, dp from the devices: as the CLI
  const plan::ResolvedPlan resolved = plan::resolve_plan(plan, model, cluster);
  const topologies::Topology topology(resolved.cluster);
  const sim::CostModels costs(topology, resolved.precision.dtype);
  const sim::SimOutput out = sim::simulate(resolved, costs, sim::EngineKind::kAnalytic);
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, out.result.step_time_s()).ptr;
  std::printf("%.*s\n", static_cast<int>(end - text), text);
  for (const std::string& dir : base::helper_directories()) std::printf("%s\n", dir.c_str());
  return 0;
}
