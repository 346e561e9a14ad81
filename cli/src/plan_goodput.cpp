#include "plan_goodput.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <optional>

#include "orrery/base/error.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/plan_run.hpp"

namespace orrery::cli {

std::string three_digits(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

void check_run_finishes(const sim::RunModel& run, const sim::CheckpointInterval& chosen,
                        const std::string& cluster, const std::string& lead) {
  if (chosen.goodput >= 1e-3) return;
  throw base::InputError(
      cluster, 0, "storage",
      lead + "the expected goodput is " + three_digits(chosen.goodput) + " at " +
          std::to_string(chosen.steps) + " steps per checkpoint: with training stopped " +
          three_digits(run.checkpoint.blocking_s) + " s per checkpoint, a mean restart of " +
          three_digits(sim::mean_restart_s(run)) + " s and a job MTBF of " +
          three_digits(1 / sim::job_failure_rate_per_s(run)) +
          " s the run never reaches its target; check the storage and failures fields");
}

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
  // The plan that comes closest to its target: when even it never reaches it, the ranking would
  // only order plans at goodput 0, so it is refused as `orrery goodput` refuses that plan.
  std::optional<sim::PlanRun> best_run;
  sim::CheckpointInterval best_interval;
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
    if (!best_run || best.goodput > best_interval.goodput) {
      best_run = run;
      best_interval = best;
    }
  }
  if (best_run) {
    check_run_finishes(best_run->run, best_interval, where,
                       "no searched plan reaches its target (--objective goodput): at best ");
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
