#include "plan_goodput.hpp"

#include <algorithm>
#include <numeric>

#include "orrery/base/error.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/plan_run.hpp"

namespace orrery::cli {

bool parse_restart_scope(const std::string& text) {
  if (text == "job") return false;
  if (text == "replica") return true;
  throw base::InputError("", 0, "--restart-scope", "got '" + text + "', expected job or replica");
}

std::vector<PlanGoodput> rank_by_goodput(const planner::PlanningJob& job,
                                         const topologies::Topology& topology,
                                         const std::string& where, planner::SearchResult& r,
                                         size_t top, const sim::MeasuredStorage& measured,
                                         bool restart_replicas) {
  std::vector<PlanGoodput> figures;
  for (const auto& p : r.ranked) {
    const plan::ResolvedPlan resolved = plan::resolve_plan(p.plan, job.model, job.cluster);
    const double step = p.eval.result.step_time_s();
    const sim::PlanRun run =
        sim::plan_run(resolved, topology, step, where, measured, {}, restart_replicas);
    const sim::CheckpointInterval best = sim::optimal_interval(run.run);
    PlanGoodput g;
    g.goodput = best.goodput;
    g.interval_steps = best.steps;
    g.tokens_per_day = p.eval.result.tokens_per_s() / run.straggler_factor * best.goodput * 86400;
    g.replicas = restart_replicas ? run.run.replicas.replicas : 1;
    figures.push_back(g);
  }
  std::vector<size_t> order(r.ranked.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return figures[a].tokens_per_day > figures[b].tokens_per_day;
  });
  order.resize(std::min(order.size(), top));
  std::vector<planner::RankedPlan> ranked;
  std::vector<PlanGoodput> kept;
  for (size_t i : order) {
    ranked.push_back(std::move(r.ranked[i]));
    kept.push_back(figures[i]);
  }
  r.ranked = std::move(ranked);
  return kept;
}

}  // namespace orrery::cli
