// `orrery goodput`: what a plan trains per day once failures, checkpoints and restarts are
// counted (docs/goodput.md): the closed form, the optimal checkpoint interval and a seeded
// Monte Carlo simulation of whole runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "commands.hpp"
#include "goodput_report.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/plan_run.hpp"
#include "orrery/sim/straggler_step.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "plan_args.hpp"
#include "plan_goodput.hpp"
#include "report_pages.hpp"

namespace orrery::cli {
namespace {

constexpr int64_t kMaxTrials = 100000;
// Checkpoint intervals and failures the Monte Carlo simulation may draw in all (about 25 million
// a second on the development machine, docs/benchmarks.md): a bound on its time and no hang on
// an absurd target.
constexpr double kMaxMonteCarloEvents = 2e8;

struct GoodputArgs {
  PlanArgs plan;
  double days = 30;
  std::optional<double> tokens;
  std::string checkpoint_every = "auto";
  uint64_t seed = 1;
  int64_t trials = 1000;
  std::string html_file;
  std::string calibration_file;
  std::string restart_scope = "job";
  std::string engine = "analytic";
  std::vector<std::string> stragglers;
  std::vector<std::string> degradations;
  int64_t des_budget = sim::DesOptions::kDefaultDesBudget;
  bool force = false;
};

// --checkpoint-every: "auto" (the optimum) or a positive whole number of steps.
std::optional<int64_t> parse_every(const std::string& text) {
  if (text == "auto") return std::nullopt;
  size_t used = 0;
  int64_t steps = 0;
  try {
    steps = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || steps <= 0) {
    throw base::InputError("", 0, "--checkpoint-every",
                           "got '" + text + "', expected auto or a positive number of steps");
  }
  return steps;
}

// An asynchronous save persists in the background; the next one cannot start before it ends.
void check_async_interval(const sim::RunModel& run, const sim::CheckpointInterval& chosen) {
  const auto& c = run.checkpoint;
  if (c.async && chosen.interval_s + c.blocking_s < c.background_s) {
    throw base::InputError("", 0, "--checkpoint-every",
                           std::to_string(chosen.steps) + " steps (" +
                               base::units::seconds(chosen.interval_s) +
                               ") is shorter than the asynchronous save's background write (" +
                               base::units::seconds(c.background_s) + ")");
  }
}

// Refuses a Monte Carlo simulation too large to finish in seconds, naming the flags that size it.
void check_monte_carlo_size(const sim::RunModel& run, const sim::CheckpointInterval& chosen,
                            double target_work_s, int64_t trials) {
  const double wall_s = target_work_s / std::max(chosen.goodput, 1e-3);
  double episodes_per_s = 0;
  for (const auto& d : run.degradations) episodes_per_s += d.rate_per_s;
  const double per_trial =
      target_work_s / chosen.interval_s + wall_s * (run.failures.total_rate_per_s + episodes_per_s);
  const double events = static_cast<double>(trials) * per_trial;
  if (!(events <= kMaxMonteCarloEvents)) {
    throw base::InputError(
        "", 0, "--trials",
        std::to_string(trials) + " runs of " + three_digits(per_trial) +
            " checkpoint intervals and failures each (" + three_digits(events) +
            " in all) is over the Monte Carlo limit of " + three_digits(kMaxMonteCarloEvents) +
            ": lower --trials, --days or --tokens, or checkpoint less often (--checkpoint-every)");
  }
}

// --straggler appends to the cluster's stragglers; --degradation replaces the cluster file's entry
// for its component (or adds one). Without either flag the cluster is used as loaded.
std::function<void(pb::ClusterSpec&)> cluster_adjust(const GoodputArgs& a) {
  auto stragglers = straggler_adjust(a.stragglers);
  if (a.degradations.empty()) return stragglers;
  return [stragglers, list = a.degradations](pb::ClusterSpec& cluster) {
    if (stragglers) stragglers(cluster);
    apply_degradations(cluster, list);
  };
}

GoodputFigures figures(const GoodputArgs& a) {
  const LoadedJob job = load_job(a.plan, cluster_adjust(a));
  const plan::ResolvedPlan plan =
      plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where);
  const topologies::Topology topology(plan.cluster);
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  const pb::CalibrationProfile* profile = a.calibration_file.empty() ? nullptr : &calibration;
  const sim::CostModels costs(topology, plan.precision.dtype, profile);
  const sim::EngineKind engine = sim::parse_engine(a.engine, "--engine");
  sim::DesOptions options;
  options.timeline = false;
  options.max_nodes = a.des_budget;
  const pb::SimResult step = sim::simulate(plan, costs, engine, options).result;
  GoodputFigures f;
  f.model = plan.model.name();
  f.cluster = plan.cluster.name();
  f.engine = sim::to_string(engine);
  f.analytic_step_s = step.step_time_s();
  f.tokens_per_step = step.tokens_per_s() * step.step_time_s();
  sim::SimulateStraggler simulate;
  if (engine == sim::EngineKind::kDes) {
    simulate = [&](double slowdown) {
      return sim::des_straggler_ratio(plan, profile, f.analytic_step_s, slowdown, options);
    };
  }
  const bool replicas = parse_restart_scope(a.restart_scope);
  const sim::PlanRun run =
      sim::plan_run(plan, topology, f.analytic_step_s, job.plan.cluster(),
                    measured_storage(calibration, a.calibration_file), simulate, replicas);
  if (replicas && !run.run.replicas.possible()) {
    throw base::InputError("", 0, "--restart-scope", "replica: " + run.run.replicas.why_not);
  }
  f.footprint = run.footprint;
  f.straggler_factor = run.straggler_factor;
  f.straggler_source = run.straggler_source;
  f.run = run.run;
  for (const std::string& d : a.degradations)
    f.degradation_flags.push_back(d.substr(0, d.find(':')));
  f.optimal = sim::optimal_interval(f.run);
  const auto every = parse_every(a.checkpoint_every);
  f.auto_interval = !every;
  f.chosen = every ? sim::interval_of(f.run, *every) : f.optimal;
  check_async_interval(f.run, f.chosen);
  check_run_finishes(f.run, f.chosen, job.plan.cluster());
  const double tokens_per_s = f.tokens_per_step / f.run.step_s;
  f.target_tokens = a.tokens ? *a.tokens : a.days * 86400 * tokens_per_s;
  f.seed = a.seed;
  if (!std::isfinite(f.target_tokens / tokens_per_s)) {
    throw base::InputError(
        "", 0, a.tokens ? "--tokens" : "--days",
        (a.tokens ? three_digits(*a.tokens) + " tokens" : three_digits(a.days) + " days") +
            " of training do not fit in a finite number of seconds");
  }
  check_monte_carlo_size(f.run, f.chosen, f.target_tokens / tokens_per_s, a.trials);
  f.monte_carlo =
      sim::monte_carlo(f.run, f.chosen.steps, f.target_tokens / tokens_per_s, a.trials, a.seed);
  return f;
}

void goodput(const GoodputArgs& a, const OutputFlags& out) {
  const GoodputFigures f = figures(a);
  const nlohmann::ordered_json json = with_header("orrery.goodput", goodput_json(f));
  if (!a.html_file.empty()) {
    write_file_atomically(a.html_file, goodput_page(json), a.force);
    std::cerr << "wrote " << a.html_file << " (open it in a browser)\n";
  }
  if (out.json) {
    std::cout << json.dump(2) << "\n";
  } else {
    std::cout << render_goodput(f);
  }
}

}  // namespace

void add_goodput_command(CLI::App& app) {
  auto a = std::make_shared<GoodputArgs>();
  auto out = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("goodput", kGoodputHelp);
  add_plan_flags(cmd, a->plan);
  cmd->add_option("--days", a->days, "Target: what the plan trains in this many failure-free days")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tokens", a->tokens, "Target in tokens (instead of --days)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--checkpoint-every", a->checkpoint_every,
                  "auto (the optimal interval) or a number of steps");
  cmd->add_option("--seed", a->seed, "Monte Carlo seed (same seed, same output)");
  cmd->add_option("--trials", a->trials, "Monte Carlo runs")
      ->check(CLI::Range(int64_t{1}, kMaxTrials));
  cmd->add_option("--restart-scope", a->restart_scope,
                  "job (a failure restarts the job from its checkpoint; default) or replica (only "
                  "the failed data-parallel replica restarts and copies its state from a live "
                  "one; sharding none or hsdp; docs/goodput.md)");
  cmd->add_option("--calibration", a->calibration_file,
                  "Calibration profile (YAML/JSON): its compute and collective curves price the "
                  "step, its checkpoint_storage each storage field the cluster file leaves out");
  cmd->add_option("--engine", a->engine,
                  "The step's engine: analytic (the default) or des; des also simulates what a "
                  "straggler (straggler_fraction, straggler_slowdown) does to the step");
  add_straggler_flag(cmd, a->stragglers);
  add_degradation_flag(cmd, a->degradations);
  cmd->add_option("--des-budget", a->des_budget,
                  "des: refuse a run whose estimate exceeds this many graph nodes (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--html", a->html_file,
                  "Write an HTML page with charts: failures per component and the run's figures "
                  "(docs/report.md)");
  cmd->add_flag("--force", a->force, "Replace --html if it exists");
  add_output_flags(cmd, *out, false);
  cmd->callback([a, out] { goodput(*a, *out); });
}

}  // namespace orrery::cli
