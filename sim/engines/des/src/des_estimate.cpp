// des_estimate and the budget check (orrery/sim/des_engine.hpp): what a des run will cost,
// known before it forks. A rank's graph depends on its pipeline stage (and, slightly, on its cp
// index), not on its tp or dp index, so one lowered rank per stage, times the ranks of that
// stage the run simulates, gives the node count without lowering them all (an all-ranks run of
// 16,384 GPUs would take gigabytes just to count).
#include <cstdio>

#include "des_internal.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::sim {

DesEstimate des_estimate(const plan::ResolvedPlan& plan, const CostModels& costs,
                         const DesOptions& options) {
  DesEstimate out;
  if (options.graph != nullptr) {
    out.simulated_ranks = options.graph->ranks_size();
    for (const auto& r : options.graph->ranks()) out.nodes += r.nodes_size();
  } else {
    out.simulated_ranks = des_simulated_ranks(plan, costs, options);
    const bool all = des::every_rank(plan, costs, options);
    plan::LowerOptions lo;
    lo.ranks = plan::representative_ranks(plan);
    const pb::ExecGraph sample = plan::lower(plan, lo);
    const int64_t pp = plan.degrees.pp;
    for (int64_t p = 0; p < pp && p < sample.ranks_size(); ++p) {
      const plan::Degrees& d = plan.stage(p);
      // A symmetric run simulates the same number of ranks on every stage.
      const int64_t ranks = all ? d.tp * d.cp * d.dp : out.simulated_ranks / pp;
      out.nodes += static_cast<int64_t>(sample.ranks(static_cast<int>(p)).nodes_size()) * ranks;
    }
  }
  out.memory_bytes = static_cast<double>(out.nodes) * kDesBytesPerNode;
  return out;
}

namespace des {

void check_budget(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options) {
  if (options.max_nodes <= 0) return;
  const DesEstimate e = des_estimate(plan, costs, options);
  if (e.nodes <= options.max_nodes) return;
  char why[320];
  std::snprintf(why, sizeof why,
                "des would simulate %lld graph nodes on %lld ranks (about %.1f GiB of memory), "
                "over its budget of %lld nodes",
                static_cast<long long>(e.nodes), static_cast<long long>(e.simulated_ranks),
                e.memory_bytes / (1024.0 * 1024 * 1024), static_cast<long long>(options.max_nodes));
  throw DesOverBudget("", 0, "des budget", why);
}

}  // namespace des
}  // namespace orrery::sim
