#include "goodput_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "orrery/base/units.hpp"
#include "table.hpp"

namespace orrery::cli {
namespace {

constexpr double kDay = 86400;
constexpr double kHour = 3600;

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Counts and rates over many orders of magnitude: four significant digits.
std::string count(double v) { return printf_string("%.4g", v); }

std::string percent(double fraction) { return printf_string("%.2f%%", 100 * fraction); }

// Durations from milliseconds to months, in the unit a reader thinks in.
std::string duration(double s) {
  if (s >= 2 * kDay) return printf_string("%.4g d", s / kDay);
  if (s >= 2 * kHour) return printf_string("%.4g h", s / kHour);
  return base::units::seconds(s);
}

std::string per_day(double rate_per_s) { return count(rate_per_s * kDay); }

std::string setting_value(const sim::Setting& s) {
  if (s.unit == base::units::Unit::kSeconds) return duration(s.value);
  return s.unit == base::units::Unit::kNone ? count(s.value) : base::units::format(s.value, s.unit);
}

std::string failures_table(const GoodputFigures& f) {
  Table t({"component", "count", "MTBF each", "failures/day"});
  for (const auto& c : f.run.failures.components) {
    t.add_row({c.component, std::to_string(c.count), duration(c.mtbf_s), per_day(c.rate_per_s)});
  }
  t.add_separator();
  t.add_row({"total", "", duration(1 / f.run.failures.total_rate_per_s) + " (job MTBF)",
             per_day(f.run.failures.total_rate_per_s)});
  return t.render();
}

std::string degradation_end(const sim::Degradation& d) {
  if (d.detect_steps > 0) return "drained after " + std::to_string(d.detect_steps) + " slow steps";
  return "lasts " + duration(d.duration_s);
}

// Each stated degradation: how often, how much slower, how it ends and the share of wall time it
// costs (the closed form's first-order term); or why none is modelled.
std::string degradations_table(const GoodputFigures& f) {
  if (f.run.degradations.empty()) return std::string(kNoDegradations) + "\n";
  Table t({"component", "count", "between episodes", "episodes/day", "step", "ends", "lost each",
           "wall time lost", "source"});
  for (const auto& d : f.run.degradations) {
    const double cost = degradation_cost_s(f.run, d);
    t.add_row({d.component, std::to_string(d.count), duration(d.mean_interval_s),
               per_day(d.rate_per_s), count(d.step_ratio) + "x", degradation_end(d), duration(cost),
               percent(d.rate_per_s * cost), degradation_source(f, d.component)});
  }
  t.add_separator();
  t.add_row({"total", "", "", "", "", "", "", percent(sim::degradation_loss_fraction(f.run)), ""});
  return t.render();
}

std::string checkpoint_fields(const GoodputFigures& f) {
  const sim::CheckpointModel& c = f.run.checkpoint;
  return render_fields({
      {"size", base::units::bytes(c.total_bytes) + " (largest rank " +
                   base::units::bytes(c.rank_bytes) + ", per node " +
                   base::units::bytes(c.node_bytes) + ")"},
      {"save", std::string(c.async ? "asynchronous" : "blocking") + ": snapshot " +
                   base::units::seconds(c.snapshot_s) + ", local NVMe " +
                   base::units::seconds(c.local_s) + ", remote " +
                   base::units::seconds(c.remote_s)},
      {"training stops",
       base::units::seconds(c.blocking_s) + " per checkpoint" +
           (c.async ? ", persisted " + base::units::seconds(c.background_s) + " later"
                    : std::string())},
      {"restart", "in place " + base::units::seconds(c.restart_s(false, false)) + ", node lost " +
                      base::units::seconds(c.restart_s(true, c.spare_nodes > 0)) + " (load " +
                      base::units::seconds(c.load_local_s) + " from local NVMe, " +
                      base::units::seconds(c.load_s) + " from the remote store; process groups " +
                      base::units::seconds(c.process_group_init_s) + ")"},
      {"mean restart", base::units::seconds(sim::mean_restart_s(f.run))},
  });
}

// How a failure restarts: the job from its checkpoint, or (--restart-scope replica) only the
// failed replica, and what that costs.
std::string restart_fields(const GoodputFigures& f) {
  const sim::ReplicaRestarts& r = f.run.replicas;
  if (!(f.run.restart_replicas && r.possible())) {
    return render_fields(
        {{"scope", "job: every failure restarts the job from its checkpoint"},
         {"replicas", r.possible() ? std::to_string(r.replicas) + " could restart alone "
                                                                  "(--restart-scope replica)"
                                   : "1 (" + r.why_not + ")"}});
  }
  const sim::CheckpointModel& c = f.run.checkpoint;
  return render_fields({
      {"scope",
       "replica: a failure restarts its replica, the others train on (switch failures "
       "restart the job)"},
      {"replicas", std::to_string(r.replicas) + " of " + std::to_string(r.ranks_per_replica) +
                       " ranks, " + count(r.replicas_per_node) + " per node"},
      {"replica downtime",
       "in place " +
           base::units::seconds(
               sim::replica_downtime_after_s(f.run, false, c.restart_s(false, false))) +
           ", node lost " +
           base::units::seconds(
               sim::replica_downtime_after_s(f.run, true, c.restart_s(true, c.spare_nodes > 0))) +
           " (state from a live replica " + base::units::seconds(r.recovery_s) + ")"},
      {"survivors wait",
       base::units::seconds(r.regroup_s) + " to regroup, then redo the step in flight"},
      {"job restarts", per_day(sim::job_failure_rate_per_s(f.run)) + " per day"},
  });
}

std::string goodput_fields(const GoodputFigures& f) {
  const auto& mc = f.monte_carlo;
  // The checkpoint interval trades checkpoints against the failures that roll the job back.
  const double mtbf = 1 / sim::job_failure_rate_per_s(f.run);
  const double tokens_per_s = f.tokens_per_step / f.run.step_s;
  return render_fields({
      {"interval", std::to_string(f.chosen.steps) +
                       " steps = " + base::units::seconds(f.chosen.interval_s) +
                       (f.auto_interval ? " (optimal)" : " (--checkpoint-every)")},
      {"optimal interval",
       std::to_string(f.optimal.steps) + " steps = " + base::units::seconds(f.optimal.interval_s) +
           " (Young " +
           base::units::seconds(sim::young_interval_s(f.run.checkpoint.blocking_s, mtbf)) +
           ", Daly " +
           base::units::seconds(sim::daly_interval_s(f.run.checkpoint.blocking_s, mtbf)) + ")"},
      {"goodput (closed form)", percent(f.chosen.goodput)},
      {"goodput (Monte Carlo)", percent(mc.goodput) + " over " + std::to_string(mc.trials) +
                                    " runs, seed " + std::to_string(f.seed)},
      {"tokens/day", count(tokens_per_s * mc.goodput * kDay) + " (failure-free " +
                         count(tokens_per_s * kDay) + ")"},
      {"target",
       count(f.target_tokens) + " tokens = " + duration(mc.target_work_s) + " failure-free"},
      {"time to target", "p10 " + duration(sim::quantile(mc.wall_s, 0.1)) + ", p50 " +
                             duration(sim::quantile(mc.wall_s, 0.5)) + ", p90 " +
                             duration(sim::quantile(mc.wall_s, 0.9))},
      {"per run (mean)", count(mc.mean_interruptions) + " interruptions, " +
                             duration(mc.mean_lost_work_s) + " of training lost, " +
                             count(mc.mean_spares_missed) + " node losses without a spare" +
                             (f.run.restart_replicas && f.run.replicas.possible()
                                  ? ", " + count(mc.mean_replica_restarts) + " replica restarts"
                                  : std::string()) +
                             (f.run.degradations.empty()
                                  ? std::string()
                                  : ", " + count(mc.mean_degradations) + " degradation episodes (" +
                                        duration(mc.mean_slow_s) + " of slow steps, " +
                                        duration(mc.mean_drain_s) + " draining)")},
  });
}

std::string settings_table(const GoodputFigures& f) {
  Table t({"setting", "value", "source"});
  for (const auto* list : {&f.run.failures.settings, &f.run.checkpoint.settings}) {
    for (const auto& s : *list) t.add_row({s.field, setting_value(s), s.source});
  }
  return t.render();
}

}  // namespace

std::string degradation_source(const GoodputFigures& f, const std::string& component) {
  const auto& flags = f.degradation_flags;
  return std::find(flags.begin(), flags.end(), component) != flags.end() ? "--degradation"
                                                                         : "cluster file";
}

double degradation_cost_s(const sim::RunModel& run, const sim::Degradation& d) {
  // The same restart as sim::degradation_loss_fraction: a drained node is a lost node.
  const double restart = run.checkpoint.restart_s(true, run.checkpoint.spare_nodes > 0);
  return sim::degradation_slow_s(run, d) + sim::degradation_drain_s(run, d, restart);
}

std::string render_goodput(const GoodputFigures& f) {
  std::ostringstream out;
  const auto& fp = f.footprint;
  out << f.model << " on " << f.cluster << ": " << fp.gpus << " GPUs, " << fp.hosts << " hosts, "
      << fp.nics << " NICs, " << fp.switches << " switches\n"
      << "step " << base::units::seconds(f.run.step_s) << " (" << f.engine << " "
      << base::units::seconds(f.analytic_step_s) << " x straggler factor "
      << count(f.straggler_factor) << "), " << count(f.tokens_per_step) << " tokens/step\n"
      << "stragglers: " << f.straggler_source << "\n\n"
      << "Failures\n"
      << failures_table(f) << "\nDegradations\n"
      << degradations_table(f) << "\nCheckpoint\n"
      << checkpoint_fields(f) << "\nRestarts\n"
      << restart_fields(f) << "\nGoodput\n"
      << goodput_fields(f) << "\nInputs (every default applied is listed)\n"
      << settings_table(f);
  return out.str();
}

}  // namespace orrery::cli
