// `orrery validate`: how far the simulator is from measurements — published training runs
// (--runs) and measured collective tables (--collectives).
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "orrery/sim/collective_validation.hpp"
#include "orrery/sim/run_validation.hpp"
#include "orrery/traces/error.hpp"
#include "orrery/traces/spec_io.hpp"
#include "orrery/traces/units.hpp"
#include "output.hpp"
#include "table.hpp"

namespace orrery::cli {
namespace {

struct ValidateArgs {
  std::string runs_file;
  std::string collectives_file;
  std::string calibration_file;
  std::string engine = "analytic";
};

std::string signed_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * fraction);
  return buf;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * fraction);
  return buf;
}

void validate_runs(const ValidateArgs& a, const OutputFlags& out) {
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  if (a.engine != "analytic" && a.engine != "des") {
    throw InputError("", 0, "--engine", "got '" + a.engine + "'" + suggest(a.engine, {"analytic", "des"}));
  }
  const sim::RunValidation v = sim::validate_runs(a.runs_file, a.engine == "des" ? sim::EngineKind::kDes : sim::EngineKind::kAnalytic,
                                                  a.calibration_file.empty() ? nullptr : &calibration);
  if (out.json) {
    nlohmann::ordered_json cases = nlohmann::ordered_json::array();
    for (const auto& c : v.cases) {
      nlohmann::ordered_json j{{"id", c.id}};
      if (!c.skipped.empty()) {
        j["skipped"] = c.skipped;
      } else {
        j["model"] = c.model;
        j["cluster"] = c.cluster;
        j["plan"] = c.plan;
        j["measured_step_s"] = c.measured_s;
        j["predicted_step_s"] = c.predicted_s;
        j["error"] = c.error;
      }
      cases.push_back(j);
    }
    nlohmann::ordered_json j{{"file", a.runs_file},
                             {"engine", a.engine},
                             {"cases", cases},
                             {"simulated", v.simulated},
                             {"median_abs_error", v.median_abs_error},
                             {"p90_abs_error", v.p90_abs_error}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  Table t({"case", "model", "cluster", "plan", "measured", "predicted", "error"});
  std::vector<std::pair<std::string, std::string>> skipped;
  for (const auto& c : v.cases) {
    if (!c.skipped.empty()) {
      skipped.emplace_back(c.id, c.skipped);
      continue;
    }
    t.add_row({c.id, c.model, c.cluster, c.plan, units::seconds(c.measured_s), units::seconds(c.predicted_s),
               signed_percent(c.error)});
  }
  std::cout << t.render() << "\n"
            << render_fields({{"cases simulated", std::to_string(v.simulated)},
                              {"median |error|", percent(v.median_abs_error)},
                              {"p90 |error|", percent(v.p90_abs_error)}});
  if (!skipped.empty()) {
    std::cout << "\nskipped\n" << render_fields(skipped);
  }
}

void validate_collectives(const ValidateArgs& a, const OutputFlags& out) {
  const sim::CollectiveValidation v = sim::validate_collectives(a.collectives_file);
  if (out.json) {
    nlohmann::ordered_json tables = nlohmann::ordered_json::array();
    for (const auto& t : v.tables) {
      nlohmann::ordered_json j{{"id", t.id}, {"collective", t.collective}, {"gpus", t.gpus}, {"nodes", t.nodes}};
      if (t.skipped) {
        j["skipped"] = t.skip_reason;
      } else {
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
                             {"median_abs_error", v.median_abs_error},
                             {"p90_abs_error", v.p90_abs_error}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  for (const auto& t : v.tables) {
    std::cout << t.id << ": " << t.collective << ", " << t.gpus << " GPUs on " << t.nodes << " node(s), "
              << t.gpu;
    if (t.skipped) {
      std::cout << " - skipped: " << t.skip_reason << "\n\n";
      continue;
    }
    std::cout << " (simulated on " << t.cluster << (t.nvls_pinned ? ", NVLS pinned" : "") << ")\n";
    Table rows({"size", "measured", "predicted", "error", "algorithm"});
    for (const auto& r : t.rows) {
      rows.add_row({units::bytes(r.bytes), units::seconds(r.measured_s), units::seconds(r.predicted_s),
                    signed_percent(r.relative_error), r.algorithm + "/" + r.protocol});
    }
    std::cout << rows.render() << "median |error| " << percent(t.median_abs_error) << ", p90 "
              << percent(t.p90_abs_error) << "\n\n";
  }
  Table summary({"table", "rows", "median |error|", "p90 |error|"});
  for (const auto& t : v.tables) {
    if (t.skipped) continue;
    summary.add_row({t.id, std::to_string(t.rows.size()), percent(t.median_abs_error), percent(t.p90_abs_error)});
  }
  std::cout << summary.render() << "\n"
            << render_fields({{"rows compared", std::to_string(v.rows)},
                              {"median |error|", percent(v.median_abs_error)},
                              {"p90 |error|", percent(v.p90_abs_error)}});
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  auto out = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("validate", "Compare predictions with measured runs or collective tables");
  auto* runs = cmd->add_option("--runs", a->runs_file, "Published runs (format of shared/validation/public_runs.json)");
  cmd->add_option("--calibration", a->calibration_file, "Calibration profile to simulate with");
  cmd->add_option("--engine", a->engine, "--runs: analytic (default) or des");
  auto* coll = cmd->add_option("--collectives", a->collectives_file,
                               "Measured nccl-tests tables (format of shared/validation/public_collectives.json)");
  add_output_flags(cmd, *out, false);
  runs->excludes(coll);
  (void)runs;
  cmd->callback([a, out] {
    if (!a->runs_file.empty()) return validate_runs(*a, *out);
    if (!a->collectives_file.empty()) return validate_collectives(*a, *out);
    throw InputError("", 0, "validate", "give --runs FILE or --collectives FILE");
  });
}

}  // namespace orrery::cli
