// `orrery validate`: how far the simulator is from measurements — published training runs
// (--runs), measured collective tables (--collectives), and a run measured here (--trace: the
// trace `orrery run --out DIR` writes, re-simulated node by node).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "csv.hpp"
#include "holdout_report.hpp"
#include "host_memory_guard.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/traces/perfetto.hpp"
#include "orrery/traces/spec_io.hpp"
#include "orrery/validation/collective_validation.hpp"
#include "orrery/validation/run_holdout.hpp"
#include "orrery/validation/run_validation.hpp"
#include "orrery/validation/trace_validation.hpp"
#include "output.hpp"
#include "report_pages.hpp"
#include "sim_report.hpp"
#include "table.hpp"
#include "text.hpp"
#include "trace_input.hpp"

namespace orrery::cli {
namespace {

struct ValidateArgs {
  std::string runs_file;
  std::string collectives_file;
  std::string trace_file;
  std::string timeline_file;
  std::string calibration_file;
  std::string engine = "analytic";
  std::string holdout_by;  // --runs: leave one family out ("" for none)
  std::string html_file;
  bool force = false;
  bool no_framework_profiles = false;      // --runs: read cases without their framework's profile
  std::optional<std::string> host_memory;  // --trace: --host-memory
};

// Skipped cases or tables are listed and counted and the status stays 0; a file of which nothing
// could be simulated validates nothing, which is an input error (status 2).
void require_one_simulated(const std::string& file, int simulated, int skipped) {
  if (simulated == 0 && skipped > 0) {
    throw base::InputError(
        file, 0, "", "none of its " + std::to_string(skipped) + " entries could be simulated");
  }
}

void report_holdout(const ValidateArgs& a, const OutputFlags& out);

// The cases as CSV: every case, a skipped one with its reason and no figures.
std::string runs_csv(const validation::RunValidation& v) {
  std::string out =
      csv_line({"case", "model", "cluster", "plan", "measured_step_s", "predicted_step_s", "error",
                "peak_memory_bytes", "memory_capacity_bytes", "skipped"});
  for (const auto& c : v.cases) {
    const bool ran = c.skipped.empty();
    auto figure = [ran](double x) { return ran ? csv_number(x) : std::string(); };
    out += csv_line({c.id, c.model, c.cluster, c.plan, figure(c.measured_s), figure(c.predicted_s),
                     figure(c.error), figure(c.peak_memory_bytes), figure(c.memory_capacity_bytes),
                     c.skipped});
  }
  return out;
}

// One row per compared message size; a skipped table is one row with its reason.
std::string collectives_csv(const validation::CollectiveValidation& v) {
  std::string out =
      csv_line({"table", "collective", "gpus", "nodes", "cluster", "bytes", "measured_s",
                "predicted_s", "error", "algorithm", "protocol", "skipped"});
  for (const auto& t : v.tables) {
    if (t.skipped) {
      out += csv_line({t.id, t.collective, csv_number(t.gpus), csv_number(t.nodes), "", "", "", "",
                       "", "", "", t.skip_reason});
      continue;
    }
    for (const auto& r : t.rows) {
      out += csv_line({t.id, t.collective, csv_number(t.gpus), csv_number(t.nodes), t.cluster,
                       csv_number(r.bytes), csv_number(r.measured_s), csv_number(r.predicted_s),
                       csv_number(r.relative_error), r.algorithm, r.protocol, ""});
    }
  }
  return out;
}

void write_html_if_asked(const ValidateArgs& a, const std::string& page) {
  if (a.html_file.empty()) return;
  write_file_atomically(a.html_file, page, a.force);
  std::cerr << "wrote " << a.html_file << " (open it in a browser)\n";
}

// `validate --runs --json`: every key in every case.
nlohmann::ordered_json runs_json(const ValidateArgs& a, const validation::RunValidation& v) {
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const auto& c : v.cases) {
    // Every key in every case; a skipped case's figures are null and `skipped` says why.
    const bool ran = c.skipped.empty();
    auto figure = [ran](double x) { return ran ? nlohmann::ordered_json(x) : nullptr; };
    cases.push_back({{"id", c.id},
                     {"skipped", c.skipped},
                     {"model", c.model},
                     {"cluster", c.cluster},
                     {"plan", c.plan},
                     {"measured_step_s", figure(c.measured_s)},
                     {"predicted_step_s", figure(c.predicted_s)},
                     {"error", figure(c.error)},
                     {"peak_memory_bytes", figure(c.peak_memory_bytes)},
                     {"memory_capacity_bytes", figure(c.memory_capacity_bytes)},
                     {"framework_profile", nlohmann::ordered_json::parse(
                                               to_json_every_field(profile_message(c.profile)))}});
  }
  nlohmann::ordered_json j = json_header("orrery.validate.runs");
  j["file"] = a.runs_file;
  j["engine"] = a.engine;
  j["cases"] = cases;
  j["simulated"] = v.simulated;
  j["skipped"] = v.skipped;
  j["out_of_memory"] = v.out_of_memory;
  j["median_abs_error"] = v.median_abs_error;
  j["p90_abs_error"] = v.p90_abs_error;
  return j;
}

void report_runs(const ValidateArgs& a, const OutputFlags& out) {
  if (!a.holdout_by.empty()) return report_holdout(a, out);
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  const validation::RunValidation v = validation::validate_runs(
      a.runs_file, sim::parse_engine(a.engine, "--engine"),
      a.calibration_file.empty() ? nullptr : &calibration, !a.no_framework_profiles);
  const nlohmann::ordered_json json = runs_json(a, v);
  // A file of which nothing ran draws nothing: the status says so below.
  if (v.simulated > 0) write_html_if_asked(a, validate_runs_page(json));
  if (out.json) {
    std::cout << json.dump(2) << "\n";
    return require_one_simulated(a.runs_file, v.simulated, v.skipped);
  }
  if (out.csv) {
    std::cout << runs_csv(v);
    return require_one_simulated(a.runs_file, v.simulated, v.skipped);
  }
  Table t(
      {"case", "model", "cluster", "plan", "profile", "measured", "predicted", "error", "memory"});
  std::vector<std::pair<std::string, std::string>> skipped;
  for (const auto& c : v.cases) {
    if (!c.skipped.empty()) {
      skipped.emplace_back(c.id, c.skipped);
      continue;
    }
    const std::string profile = c.profile.framework.empty() ? "-" : c.profile.framework;
    t.add_row({c.id, c.model, c.cluster, c.plan, profile, base::units::seconds(c.measured_s),
               base::units::seconds(c.predicted_s), signed_percent(c.error),
               memory_verdict(c.peak_memory_bytes, c.memory_capacity_bytes)});
  }
  std::cout << t.render() << "\n"
            << render_fields({{"cases simulated", std::to_string(v.simulated)},
                              {"cases skipped", std::to_string(v.skipped)},
                              {"predicted out of memory", std::to_string(v.out_of_memory)},
                              {"median |error|", percent(v.median_abs_error)},
                              {"p90 |error|", percent(v.p90_abs_error)}});
  if (!skipped.empty()) {
    std::cout << "\nskipped\n" << render_fields(skipped);
  }
  require_one_simulated(a.runs_file, v.simulated, v.skipped);
}

void report_holdout(const ValidateArgs& a, const OutputFlags& out) {
  const auto key = validation::parse_holdout_key(a.holdout_by, "--holdout-by");
  const bool show = isatty(STDERR_FILENO) != 0;
  const auto progress = [show](const std::string& family, int done, int total) {
    if (!show) return;
    std::fprintf(stderr, "\r\033[K[%d/%d] fitting %s", done + 1, total,
                 family.empty() ? "on every family (in-sample)" : ("without " + family).c_str());
    if (done + 1 == total) std::fprintf(stderr, "\r\033[K");
  };
  const validation::RunHoldout h =
      validation::holdout_runs(a.runs_file, sim::parse_engine(a.engine, "--engine"), key, progress,
                               !a.no_framework_profiles);
  if (out.csv) {
    std::cout << holdout_csv(h);
    return;
  }
  print_holdout(h, a.runs_file, a.engine, out.json);
}

// `validate --collectives --json`: every key in every table; a skipped one has its reason, no
// rows and null figures.
nlohmann::ordered_json collectives_json(const validation::CollectiveValidation& v,
                                        int64_t skipped) {
  nlohmann::ordered_json tables = nlohmann::ordered_json::array();
  for (const auto& t : v.tables) {
    nlohmann::ordered_json j{{"id", t.id},
                             {"collective", t.collective},
                             {"gpus", t.gpus},
                             {"nodes", t.nodes},
                             {"skipped", t.skipped ? t.skip_reason : ""},
                             {"cluster", nullptr},
                             {"rows", nlohmann::ordered_json::array()},
                             {"median_abs_error", nullptr},
                             {"p90_abs_error", nullptr}};
    if (!t.skipped) {
      j["cluster"] = t.cluster;
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const auto& r : t.rows) {
        rows.push_back({{"bytes", r.bytes},
                        {"measured_s", r.measured_s},
                        {"predicted_s", r.predicted_s},
                        {"error", r.relative_error},
                        {"algorithm", r.algorithm},
                        {"protocol", r.protocol}});
      }
      j["rows"] = rows;
      j["median_abs_error"] = t.median_abs_error;
      j["p90_abs_error"] = t.p90_abs_error;
    }
    tables.push_back(j);
  }
  nlohmann::ordered_json j{{"file", v.file},
                           {"tables", tables},
                           {"rows", v.rows},
                           {"skipped", skipped},
                           {"median_abs_error", v.median_abs_error},
                           {"p90_abs_error", v.p90_abs_error}};
  return with_header("orrery.validate.collectives", j);
}

void report_collectives(const ValidateArgs& a, const OutputFlags& out) {
  const validation::CollectiveValidation v = validation::validate_collectives(a.collectives_file);
  const auto skipped =
      std::count_if(v.tables.begin(), v.tables.end(), [](const auto& t) { return t.skipped; });
  const int simulated = static_cast<int>(v.tables.size() - static_cast<size_t>(skipped));
  const nlohmann::ordered_json json = collectives_json(v, skipped);
  if (simulated > 0) write_html_if_asked(a, validate_collectives_page(json));
  if (out.json) {
    std::cout << json.dump(2) << "\n";
    return require_one_simulated(a.collectives_file, simulated, static_cast<int>(skipped));
  }
  if (out.csv) {
    std::cout << collectives_csv(v);
    return require_one_simulated(a.collectives_file, simulated, static_cast<int>(skipped));
  }
  for (const auto& t : v.tables) {
    std::cout << t.id << ": " << t.collective << ", " << t.gpus << " GPUs on " << t.nodes
              << " node(s), " << t.gpu;
    if (t.skipped) {
      std::cout << " - skipped: " << t.skip_reason << "\n\n";
      continue;
    }
    std::cout << " (simulated on " << t.cluster << (t.nvls_pinned ? ", NVLS pinned" : "") << ")\n";
    Table rows({"size", "measured", "predicted", "error", "algorithm"});
    for (const auto& r : t.rows) {
      rows.add_row({base::units::bytes(r.bytes), base::units::seconds(r.measured_s),
                    base::units::seconds(r.predicted_s), signed_percent(r.relative_error),
                    r.algorithm + "/" + r.protocol});
    }
    std::cout << rows.render() << "median |error| " << percent(t.median_abs_error) << ", p90 "
              << percent(t.p90_abs_error) << "\n\n";
  }
  Table summary({"table", "rows", "median |error|", "p90 |error|"});
  for (const auto& t : v.tables) {
    if (t.skipped) continue;
    summary.add_row({t.id, std::to_string(t.rows.size()), percent(t.median_abs_error),
                     percent(t.p90_abs_error)});
  }
  std::cout << summary.render() << "\n"
            << render_fields({{"rows compared", std::to_string(v.rows)},
                              {"tables skipped", std::to_string(skipped)},
                              {"median |error|", percent(v.median_abs_error)},
                              {"p90 |error|", percent(v.p90_abs_error)}});
  require_one_simulated(a.collectives_file, simulated, static_cast<int>(skipped));
}

nlohmann::ordered_json groups_json(const std::vector<validation::GroupComparison>& groups) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& g : groups) {
    out.push_back({{"name", g.name},
                   {"nodes", g.nodes},
                   {"measured_s", g.measured_s},
                   {"predicted_s", g.predicted_s},
                   {"error", g.error},
                   {"median_abs_node_error", g.median_abs_error}});
  }
  return out;
}

Table groups_table(const std::string& what,
                   const std::vector<validation::GroupComparison>& groups) {
  Table t({what, "nodes", "measured", "predicted", "error", "median |node error|"});
  for (const auto& g : groups) {
    t.add_row({g.name, std::to_string(g.nodes), base::units::seconds(g.measured_s),
               base::units::seconds(g.predicted_s), signed_percent(g.error),
               percent(g.median_abs_error)});
  }
  return t;
}

// The nodes the simulator misses most, by |log(predicted / measured)|, ties by rank and id.
std::vector<const validation::NodeComparison*> worst_nodes(const validation::TraceValidation& v,
                                                           size_t count) {
  std::vector<const validation::NodeComparison*> out;
  for (const auto& n : v.nodes) {
    if (n.measured_s > 0 && n.predicted_s > 0) out.push_back(&n);
  }
  const auto miss = [](const validation::NodeComparison* n) {
    return std::abs(std::log(n->predicted_s / n->measured_s));
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const auto* a, const auto* b) { return miss(a) > miss(b); });
  if (out.size() > count) out.resize(count);
  return out;
}

constexpr size_t kWorstNodes = 10;

// Every node compared, in the trace's rank and node order: a node one side did not time has
// empty figures for that side and no error.
std::string trace_csv(const validation::TraceValidation& v) {
  std::string out = csv_line({"rank", "id", "name", "group", "measured_s", "predicted_s", "error"});
  for (const auto& n : v.nodes) {
    const bool both = n.measured_s > 0 && n.predicted_s > 0;
    out += csv_line({csv_number(n.rank), csv_number(n.id), n.name, n.group,
                     n.measured_s > 0 ? csv_number(n.measured_s) : std::string(),
                     n.predicted_s > 0 ? csv_number(n.predicted_s) : std::string(),
                     both ? csv_number(n.predicted_s / n.measured_s - 1) : std::string()});
  }
  return out;
}

void report_trace(const ValidateArgs& a, const OutputFlags& out) {
  const sim::EngineKind engine = sim::parse_engine(a.engine, "--engine");
  if (!a.timeline_file.empty() && engine != sim::EngineKind::kDes) {
    throw base::InputError(
        "", 0, "--timeline",
        "the analytic engine predicts no timeline; a timeline needs --engine des");
  }
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  check_trace_memory({a.trace_file}, "--trace", host_memory_limit(a.host_memory));
  const pb::ExecGraph trace = read_orrery_trace(a.trace_file);
  const validation::TraceValidation v = validation::validate_trace(
      trace, a.trace_file, engine, a.calibration_file.empty() ? nullptr : &calibration);
  if (!a.timeline_file.empty()) {
    write_file_atomically(
        a.timeline_file,
        to_perfetto_json({{&v.predicted_timeline, "predicted"}, {&trace, "measured"}}), a.force);
    std::cerr << "wrote " << a.timeline_file
              << " (predicted and measured side by side; open in ui.perfetto.dev)\n";
  }
  if (out.csv) {
    std::cout << trace_csv(v);
    return;
  }
  const auto worst = worst_nodes(v, kWorstNodes);
  if (out.json) {
    nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
    for (const auto* n : worst) {
      nodes.push_back({{"rank", n->rank},
                       {"id", n->id},
                       {"name", n->name},
                       {"group", n->group},
                       {"measured_s", n->measured_s},
                       {"predicted_s", n->predicted_s},
                       {"error", n->predicted_s / n->measured_s - 1}});
    }
    nlohmann::ordered_json j{{"trace", a.trace_file},
                             {"engine", a.engine},
                             {"calibration", a.calibration_file},
                             {"ranks", v.ranks},
                             {"nodes", v.nodes.size()},
                             {"measured_step_s", v.measured_step_s},
                             {"predicted_step_s", v.predicted_step_s},
                             {"step_error", v.step_error},
                             {"op_classes", groups_json(v.op_classes)},
                             {"collectives", groups_json(v.collectives)},
                             {"worst_nodes", nodes}};
    std::cout << with_header("orrery.validate.trace", j).dump(2) << "\n";
    return;
  }
  std::cout << render_fields(
                   {{"trace", a.trace_file + " (" + trace.model() + " on " + trace.cluster() +
                                  ", " + std::to_string(v.ranks) + " ranks, " +
                                  std::to_string(v.nodes.size()) + " nodes)"},
                    {"engine", a.engine + (a.calibration_file.empty()
                                               ? ""
                                               : ", calibrated by " + a.calibration_file)},
                    {"measured step", base::units::seconds(v.measured_step_s)},
                    {"predicted step", base::units::seconds(v.predicted_step_s)},
                    {"step error", signed_percent(v.step_error)}})
            << "\n"
            << groups_table("op class", v.op_classes).render() << "\n";
  if (!v.collectives.empty())
    std::cout << groups_table("communication", v.collectives).render() << "\n";
  Table t({"worst nodes", "rank", "measured", "predicted", "error"});
  for (const auto* n : worst) {
    t.add_row({n->name, std::to_string(n->rank), base::units::seconds(n->measured_s),
               base::units::seconds(n->predicted_s),
               signed_percent(n->predicted_s / n->measured_s - 1)});
  }
  std::cout << t.render();
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  auto out = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("validate", kValidateHelp);
  auto* runs = cmd->add_option("--runs", a->runs_file,
                               "Published runs (format of shared/validation/public_runs.json)");
  auto* coll = cmd->add_option(
      "--collectives", a->collectives_file,
      "Measured nccl-tests tables (format of shared/validation/public_collectives.json)");
  auto* trace = cmd->add_option(
      "--trace", a->trace_file,
      "A measured run (orrery run --out DIR writes DIR/trace.json): re-simulate it node by node");
  auto* calibration =
      cmd->add_option("--calibration", a->calibration_file, "Calibration profile to simulate with");
  cmd->add_option("--engine", a->engine, "--runs, --trace: analytic (default) or des");
  auto* holdout = cmd->add_option(
      "--holdout-by", a->holdout_by,
      "--runs: framework | gpu | source: predict each family with the kernel factor fitted on "
      "the others (leave-one-family-out; docs/validation.md)");
  cmd->add_option("--timeline", a->timeline_file,
                  "--trace: write predicted and measured timelines side by side (Perfetto JSON; "
                  "needs --engine des)");
  auto* html = cmd->add_option(
      "--html", a->html_file,
      "--runs, --collectives: write an HTML page with charts (predicted against measured; "
      "docs/report.md)");
  cmd->add_flag("--force", a->force, "Replace --timeline or --html if it exists");
  cmd->add_option("--host-memory", a->host_memory,
                  "--trace: memory the trace may take while read (a size, \"8 GiB\"; default: "
                  "what /proc/meminfo calls available)")
      ->needs(trace);
  add_output_flags(cmd, *out, false);
  add_csv_flag(cmd, *out,
               "--runs: one row per case (with --holdout-by: per case and family); --collectives: "
               "one row per message size; --trace: one row per node");
  holdout->needs(runs);
  cmd->add_flag("--no-framework-profiles", a->no_framework_profiles,
                "--runs: read every case without the profile its framework names (as before "
                "profiles; docs/validation.md), to measure what the profiles change")
      ->needs(runs);
  holdout->excludes(calibration);  // the holdout fits its own kernel factor
  runs->excludes(coll);
  runs->excludes(trace);
  coll->excludes(trace);
  html->excludes(holdout);
  html->excludes(trace);
  cmd->callback([a, out] {
    if (!a->runs_file.empty()) return report_runs(*a, *out);
    if (!a->collectives_file.empty()) return report_collectives(*a, *out);
    if (!a->trace_file.empty()) return report_trace(*a, *out);
    throw base::InputError("", 0, "validate",
                           "give --runs FILE, --collectives FILE or --trace FILE");
  });
}

}  // namespace orrery::cli
