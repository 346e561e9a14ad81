// `orrery sweep`: one job simulated at every point of one or two varied axes ("what if the
// network were 2x faster, at 16 or 32 nodes"), each point through simulate's own path
// (load_job, then simulate_job), as a table, CSV or JSON whose points a chart reads directly.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "csv.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "plan_args.hpp"
#include "sim_report.hpp"
#include "sim_run.hpp"
#include "sweep_axes.hpp"
#include "table.hpp"
#include "text.hpp"

namespace orrery::cli {
namespace {

struct SweepArgs {
  PlanArgs plan;
  std::vector<std::string> vary;
  std::string engine = "analytic";
  std::string calibration_file;
  int64_t des_budget = sim::DesOptions::kDefaultDesBudget;  // --des-budget, as simulate's
};

struct SweepPoint {
  std::vector<std::string> values;  // one per axis
  SimulatedJob simulated;
};

// Every combination of the axes' values, the first axis outermost.
std::vector<std::vector<std::string>> grid(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<std::string>> points = {{}};
  for (const auto& axis : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points) {
      for (const auto& v : axis.values) {
        next.push_back(p);
        next.back().push_back(v);
      }
    }
    points = std::move(next);
  }
  return points;
}

// "nodes=16, nic-bandwidth=2": a point as its changes.
std::string point_label(const std::vector<SweepAxis>& axes, const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + axes[i].name + "=" + v[i];
  return s;
}

SweepPoint simulate_point(const SweepArgs& a, const std::vector<SweepAxis>& axes,
                          const std::vector<std::string>& values, sim::EngineKind engine,
                          const pb::CalibrationProfile* calibration) {
  PlanArgs args = a.plan;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!axes[i].changes_cluster) apply_plan_axis(axes[i], values[i], args);
  }
  auto adjust = [&](pb::ClusterSpec& cluster) {
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i].changes_cluster) apply_cluster_axis(axes[i], values[i], cluster);
    }
  };
  try {
    sim::DesOptions options;
    options.max_nodes = a.des_budget;
    SweepPoint p{values, simulate_job(load_job(args, adjust), engine, calibration, options)};
    // The engine's wall time varies from run to run; it never reaches a result.
    p.simulated.output.result.clear_wall_time_s();
    return p;
  } catch (const base::InputError& e) {
    throw base::InputError("", 0, "--vary",
                           "at " + point_label(axes, values) + ": " + std::string(e.what()));
  }
}

// A value as JSON: a number when the whole text is one (a chart's x axis), else the text.
nlohmann::ordered_json axis_value(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) {
      if (v == std::floor(v) && std::fabs(v) < 9e15) return static_cast<int64_t>(v);
      return v;
    }
  } catch (const std::exception&) {
  }
  return text;
}

std::string render_json(const SweepArgs& a, const std::vector<SweepAxis>& axes,
                        const std::vector<SweepPoint>& points) {
  using nlohmann::ordered_json;
  ordered_json j = json_header("orrery.sweep");
  j["engine"] = a.engine;
  ordered_json jaxes = ordered_json::array();
  for (const auto& axis : axes) {
    ordered_json values = ordered_json::array();
    for (const auto& v : axis.values) values.push_back(axis_value(v));
    jaxes.push_back({{"name", axis.name}, {"values", values}});
  }
  j["axes"] = jaxes;
  ordered_json jpoints = ordered_json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const auto& r = p.simulated.output.result;
    ordered_json values = ordered_json::object();
    for (size_t k = 0; k < axes.size(); ++k) values[axes[k].name] = axis_value(p.values[k]);
    const pb::RankMemory* m = tightest_rank(r);
    jpoints.push_back({{"point", i + 1},
                       {"values", values},
                       {"plan", plan_summary(p.simulated.plan)},
                       {"devices", p.simulated.plan.world_size()},
                       {"step_time_s", r.step_time_s()},
                       {"tokens_per_s", r.tokens_per_s()},
                       {"mfu", r.mfu()},
                       {"peak_bytes", m ? m->peak_bytes() : 0.0},
                       {"capacity_bytes", m ? m->capacity_bytes() : 0.0},
                       {"oom", !out_of_memory(r).empty()},
                       {"result", ordered_json::parse(to_json_every_field(r))}});
  }
  j["points"] = jpoints;
  return j.dump(2) + "\n";
}

std::string render_csv(const std::vector<SweepAxis>& axes, const std::vector<SweepPoint>& points) {
  std::vector<std::string> header = {"point"};
  for (const auto& axis : axes) header.push_back(axis.name);
  const auto sim_header = sim_csv_header();
  header.insert(header.end(), sim_header.begin(), sim_header.end());
  std::string out = csv_line(header);
  for (size_t i = 0; i < points.size(); ++i) {
    std::vector<std::string> row = {std::to_string(i + 1)};
    row.insert(row.end(), points[i].values.begin(), points[i].values.end());
    const auto sim_row = sim_csv_row(points[i].simulated.plan, points[i].simulated.output.result);
    row.insert(row.end(), sim_row.begin(), sim_row.end());
    out += csv_line(row);
  }
  return out;
}

std::string render_text(const SweepArgs& a, const std::vector<SweepAxis>& axes,
                        const std::vector<SweepPoint>& points) {
  const auto& first = points.front().simulated;
  std::string out = first.plan.model.name() + " on " + first.plan.cluster.name() + ", engine " +
                    a.engine + ", " + std::to_string(points.size()) + " points\n\n";
  std::vector<std::string> columns = {"#"};
  for (const auto& axis : axes) columns.push_back(axis.name);
  for (const char* c : {"plan", "step", "vs #1", "tokens/s", "MFU", "memory (tightest rank)"})
    columns.emplace_back(c);
  Table table(columns);
  const double base_step = first.output.result.step_time_s();
  bool any_oom = false;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& r = points[i].simulated.output.result;
    std::vector<std::string> row = {std::to_string(i + 1)};
    row.insert(row.end(), points[i].values.begin(), points[i].values.end());
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2fx", r.step_time_s() / base_step);
    const pb::RankMemory* m = tightest_rank(r);
    any_oom = any_oom || !out_of_memory(r).empty();
    for (std::string cell :
         {plan_summary(points[i].simulated.plan), base::units::seconds(r.step_time_s()),
          std::string(ratio), base::units::number(std::round(r.tokens_per_s())), percent(r.mfu()),
          m ? memory_verdict(m->peak_bytes(), m->capacity_bytes()) : std::string("-")})
      row.push_back(cell);
    table.add_row(row);
  }
  out += table.render();
  out += "\nvs #1: step time over point 1's";
  if (any_oom) out += "; OOM: the point does not fit in memory, its figures assume it did";
  return out + "\n";
}

void run_sweep(const SweepArgs& a, const OutputFlags& out, const CLI::App& cmd) {
  const std::vector<SweepAxis> axes = parse_axes(a.vary, cmd);
  const sim::EngineKind engine = sim::parse_engine(a.engine, "--engine");
  pb::CalibrationProfile calibration;
  if (!a.calibration_file.empty()) read_spec_file(a.calibration_file, &calibration);
  std::vector<SweepPoint> points;
  for (const auto& values : grid(axes)) {
    points.push_back(simulate_point(a, axes, values, engine,
                                    a.calibration_file.empty() ? nullptr : &calibration));
  }
  if (out.json) {
    std::cout << render_json(a, axes, points);
  } else if (out.csv) {
    std::cout << render_csv(axes, points);
  } else {
    std::cout << render_text(a, axes, points);
  }
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  auto out = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("sweep", kSweepHelp);
  add_plan_flags(cmd, a->plan);
  cmd->add_option("--vary", a->vary,
                  "NAME=V1,V2,...: an axis to vary, once or twice (a grid). NAME is a plan flag "
                  "(nodes, global-batch, seq, tp, micro-batch, model, ...), device (a device "
                  "preset for every node), or a scale of nic-bandwidth, nic-latency (the "
                  "scale-out network) or link-bandwidth, link-latency (the intra-node device "
                  "link)")
      ->required()
      ->allow_extra_args(false);
  cmd->add_option("--engine", a->engine,
                  "analytic (closed form; the default) or des (SimGrid discrete events)");
  cmd->add_option("--des-budget", a->des_budget,
                  "des: refuse a point whose estimate exceeds this many graph nodes (about 640 "
                  "bytes of memory each; 0: no limit; default 12000000)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--calibration", a->calibration_file, "Calibration profile (YAML/JSON)");
  add_output_flags(cmd, *out, false);
  add_csv_flag(cmd, *out, "one row per point: its values, then simulate --csv's columns");
  cmd->callback([a, out, cmd] { run_sweep(*a, *out, *cmd); });
}

}  // namespace orrery::cli
