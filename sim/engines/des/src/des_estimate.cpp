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
namespace {

// The graph nodes of one rank, lowered alone: one stage's graph at a time stays small and is
// freed into a heap the next one reuses, where lowering all stages at once and freeing them took
// 4 s of CPU for 3 million nodes (malloc's consolidation and page faults, KORT-T5-1T-full).
int64_t stage_nodes(const plan::ResolvedPlan& plan, int64_t rank) {
  plan::LowerOptions lo;
  lo.ranks = {rank};
  const pb::ExecGraph g = plan::lower(plan, lo);
  return g.ranks_size() == 0 ? 0 : g.ranks(0).nodes_size();
}

}  // namespace

DesEstimate des_estimate(const plan::ResolvedPlan& plan, const CostModels& costs,
                         const DesOptions& options) {
  DesEstimate out;
  if (options.graph != nullptr) {
    out.simulated_ranks = options.graph->ranks_size();
    for (const auto& r : options.graph->ranks()) out.nodes += r.nodes_size();
  } else {
    out.simulated_ranks = des_simulated_ranks(plan, costs, options);
    const bool all = des::every_rank(plan, costs, options);
    const std::vector<int64_t> sample = plan::representative_ranks(plan);
    const int64_t pp = plan.degrees.pp;
    for (int64_t p = 0; p < pp && p < static_cast<int64_t>(sample.size()); ++p) {
      const plan::Degrees& d = plan.stage(p);
      // A symmetric run simulates the same number of ranks on every stage.
      const int64_t ranks = all ? d.tp * d.cp * d.dp : out.simulated_ranks / pp;
      out.nodes += stage_nodes(plan, sample[static_cast<size_t>(p)]) * ranks;
    }
  }
  out.memory_bytes = static_cast<double>(out.nodes) * kDesBytesPerNode;
  return out;
}

namespace des {

void check_budget(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options) {
  if (options.max_nodes <= 0) return;
  // A symmetric run lowers the ranks the estimate would count (one per stage, or per cp and
  // stage): the engine process counts its own graph (check_lowered_budget) instead of this
  // process lowering it a second time.
  if (options.graph == nullptr && !every_rank(plan, costs, options)) return;
  refuse_over_budget(des_estimate(plan, costs, options), options.max_nodes);
}

void check_lowered_budget(const pb::ExecGraph& graph, int64_t max_nodes) {
  if (max_nodes <= 0) return;
  DesEstimate e;
  e.simulated_ranks = graph.ranks_size();
  for (const auto& r : graph.ranks()) e.nodes += r.nodes_size();
  e.memory_bytes = static_cast<double>(e.nodes) * kDesBytesPerNode;
  refuse_over_budget(e, max_nodes);
}

void refuse_over_budget(const DesEstimate& e, int64_t max_nodes) {
  if (e.nodes <= max_nodes) return;
  char why[320];
  std::snprintf(why, sizeof why,
                "des would simulate %lld graph nodes on %lld ranks (about %.1f GiB of memory), "
                "over its budget of %lld nodes",
                static_cast<long long>(e.nodes), static_cast<long long>(e.simulated_ranks),
                e.memory_bytes / (1024.0 * 1024 * 1024), static_cast<long long>(max_nodes));
  throw DesOverBudget("", 0, "des budget", why);
}

}  // namespace des
}  // namespace orrery::sim
