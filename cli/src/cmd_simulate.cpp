// `orrery simulate`: predict one plan's step time, throughput, memory and timeline.
#include <iostream>

#include "commands.hpp"
#include "csv.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/traces/chakra.hpp"
#include "orrery/traces/perfetto.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "plan_args.hpp"
#include "report_pages.hpp"
#include "sim_report.hpp"
#include "sim_run.hpp"

namespace orrery::cli {
namespace {

// Chakra export lowers every rank: beyond this many the files run to gigabytes.
constexpr int64_t kMaxChakraRanks = 4096;

struct SimulateArgs {
  PlanArgs plan;
  std::string engine = "analytic";
  std::string calibration_file;
  std::string trace_file;
  std::string chakra_folder;
  std::string graph_file;
  std::string html_file;
  std::vector<std::string> stragglers;
  bool force = false;
  bool all_ranks = false;
  bool allow_oom = false;
  int64_t des_budget = sim::DesOptions::kDefaultDesBudget;
};

void simulate(const SimulateArgs& a, const OutputFlags& out) {
  const LoadedJob job = load_job(a.plan, straggler_adjust(a.stragglers));
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  const sim::EngineKind engine = sim::parse_engine(a.engine, "--engine");
  if (!a.trace_file.empty() && engine != sim::EngineKind::kDes) {
    throw base::InputError(
        "", 0, "--trace",
        "the analytic engine predicts no timeline; a timeline needs --engine des");
  }
  if (!a.chakra_folder.empty() && engine != sim::EngineKind::kDes) {
    // Files without durations would replay every compute node in 1 ns: refused, not written.
    throw base::InputError("", 0, "--chakra",
                           "Chakra files carry each node's duration, which only the des engine's "
                           "timeline has; add --engine des");
  }
  if (!a.chakra_folder.empty()) {
    // Checked before every rank is simulated (the export needs them all).
    const int64_t ranks =
        plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where).world_size();
    if (ranks > kMaxChakraRanks) {
      throw base::InputError("", 0, "--chakra",
                             "the plan has " + std::to_string(ranks) +
                                 " ranks; Chakra export writes every rank and stops at " +
                                 std::to_string(kMaxChakraRanks));
    }
  }
  sim::DesOptions options;
  // The export needs every rank's timeline, not the representatives'.
  options.all_ranks = a.all_ranks || !a.chakra_folder.empty();
  // The page draws the des engine's timeline when there is one.
  options.timeline = !a.trace_file.empty() || !a.chakra_folder.empty() || !a.html_file.empty();
  options.max_nodes = a.des_budget;
  SimulatedJob simulated =
      simulate_job(job, engine, a.calibration_file.empty() ? nullptr : &calibration, options);
  const plan::ResolvedPlan& plan = simulated.plan;
  // Printed below without its wall time.
  sim::SimOutput& result = simulated.output;
  if (!a.trace_file.empty()) {
    write_file_atomically(a.trace_file, to_perfetto_json({{&result.timeline, "predicted"}}),
                          a.force);
    std::cerr << "wrote " << a.trace_file << " (open in ui.perfetto.dev)\n";
  }
  if (!a.graph_file.empty()) {
    plan::LowerOptions options;
    options.ranks = plan::representative_ranks(plan);
    write_file_atomically(a.graph_file, to_json(plan::lower(plan, options)), a.force);
    std::cerr << "wrote " << a.graph_file << " (one representative rank per pipeline stage)\n";
  }
  if (!a.chakra_folder.empty()) {
    const auto files = write_chakra(result.timeline, a.chakra_folder, a.force);
    const auto folder = files.back().parent_path();
    std::cerr << "wrote " << folder.string() << "/ (" << files.size() - 1
              << " Chakra files, the des timeline of every rank, and comm_groups.json; ASTRA-sim: "
                 "--workload-configuration="
              << chakra_workload_prefix(folder).string()
              << " --comm-group-configuration=" << files.back().string() << ")\n";
  }
  // The engine's own wall time varies from run to run: it goes to stderr, never into results.
  if (result.result.wall_time_s() > 0) {
    std::cerr << "simulated " << result.result.events() << " events in "
              << result.result.wall_time_s() << " s\n";
  }
  result.result.clear_wall_time_s();
  *result.result.mutable_framework() = profile_message(job.profile);
  const nlohmann::ordered_json json = result_json("orrery.simulate", result.result);
  if (!a.html_file.empty()) {
    const bool timed = engine == sim::EngineKind::kDes;
    write_file_atomically(
        a.html_file, simulate_page(json, plan_summary(plan), timed ? &result.timeline : nullptr),
        a.force);
    std::cerr << "wrote " << a.html_file << " (open it in a browser)\n";
  }
  if (out.json) {
    std::cout << json.dump(2) << "\n";
  } else if (out.csv) {
    std::cout << csv_line(sim_csv_header()) << csv_line(sim_csv_row(plan, result.result));
  } else {
    std::cout << render_result(plan, result.result) << render_profile(job.profile);
  }
  // The report is printed either way (it shows where the memory goes); the status says the plan
  // cannot run, so that a script does not take its step time for one.
  if (const std::string oom = out_of_memory(result.result); !oom.empty() && !a.allow_oom) {
    std::cout.flush();
    throw base::InputError("", 0, "memory",
                           "the plan does not fit: " + oom +
                               " (--allow-oom exits 0 with the "
                               "same report)");
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto out = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("simulate", kSimulateHelp);
  add_plan_flags(cmd, a->plan);
  cmd->add_option("--engine", a->engine,
                  "analytic (closed form, microseconds; the default) or des (SimGrid discrete "
                  "events, contention)");
  cmd->add_flag("--all-ranks", a->all_ranks,
                "des: simulate every rank instead of exploiting symmetry");
  add_straggler_flag(cmd, a->stragglers);
  cmd->add_option("--des-budget", a->des_budget,
                  "des: refuse a run whose estimate exceeds this many graph nodes (about 640 "
                  "bytes of memory each; 0: no limit; default 12000000)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--calibration", a->calibration_file, "Calibration profile (YAML/JSON)");
  cmd->add_option("--trace", a->trace_file, "Write the timeline as Perfetto/Chrome trace JSON");
  cmd->add_option("--chakra", a->chakra_folder,
                  "des: write the folder DIR of Chakra ET files trace.<rank>.et and "
                  "comm_groups.json for ASTRA-sim (simulates every rank; written whole)");
  cmd->add_option("--graph", a->graph_file,
                  "Write the execution graph (representative ranks) as JSON");
  cmd->add_option("--html", a->html_file,
                  "Write an HTML page with charts of the result (breakdown, memory; the "
                  "timeline with --engine des), self-contained (docs/report.md)");
  cmd->add_flag("--force", a->force, "Replace output files that exist");
  cmd->add_flag("--allow-oom", a->allow_oom,
                "Exit 0 when a rank does not fit in its device's memory (the report says so "
                "either way; without it the exit status is 2)");
  add_output_flags(cmd, *out, false);
  add_csv_flag(cmd, *out, "the job, plan, figures, breakdown and tightest rank's memory");
  cmd->callback([a, out] { simulate(*a, *out); });
}

}  // namespace orrery::cli
