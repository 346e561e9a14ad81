// `orrery calibrate`: fits the simulator's compute curves and collective alpha-beta terms to
// measured traces (orrery bench files, executor run traces, PyTorch profiler traces) and writes
// a CalibrationProfile for `simulate`, `plan` and `validate --calibration`.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "host_memory_guard.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/units.hpp"
#include "orrery/calibration/calibration_fit.hpp"
#include "orrery/calibration/calibration_samples.hpp"
#include "orrery/calibration/checkpoint_fit.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/kineto.hpp"
#include "orrery/traces/spec_io.hpp"
#include "output.hpp"
#include "table.hpp"
#include "text.hpp"
#include "trace_input.hpp"

namespace orrery::cli {
namespace {

// A held parameter's value in its unit, as the proto field's name says it ("_s", "_bytes_per_s").
std::string held_value(const calibration::HeldParam& h) {
  const auto ends = [&](const std::string& suffix) {
    return h.name.size() >= suffix.size() &&
           h.name.compare(h.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("_bytes_per_s")) return base::units::bandwidth(h.value);
  if (ends("_s")) return base::units::seconds(h.value);
  return base::units::number(h.value);
}

struct CalibrateArgs {
  std::vector<std::string> traces;
  std::string out_file;
  std::string device;
  std::string cluster;
  std::string comm_scope = "intra_node";
  std::string name;
  int64_t min_samples = 3;
  bool force = false;
  std::optional<std::string> host_memory;  // --host-memory
};

std::string plain(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// "0.712 ± 0.004" for a fitted parameter, "0.5 (held)" for a held one.
class ParamText {
 public:
  explicit ParamText(const pb::FitStats& fit) : fit_(fit) {}
  std::string operator()(const std::string& name, double value,
                         const std::function<std::string(double)>& show) const {
    const auto& names = fit_.fitted_params();
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return show(value) + " (held)";
    const auto i = it - names.begin();
    if (i >= fit_.param_std_errors_size()) return show(value);
    return show(value) + " ± " + show(fit_.param_std_errors(static_cast<int>(i)));
  }

 private:
  const pb::FitStats& fit_;
};

// A ratio for people: four significant digits.
std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A curve's op for the tables: a class's curve prices its ops that have no curve of their own
// ("all ops").
std::string op_label(const pb::ComputeCurve& c) {
  if (c.op().empty()) return std::string("all ops");
  return c.op() + (c.phase() == pb::PHASE_BACKWARD  ? " backward"
                   : c.phase() == pb::PHASE_FORWARD ? " forward"
                                                    : "");
}

std::string secs(double v) { return base::units::seconds(v); }
std::string flop(double v) { return base::units::flops(v); }
std::string bw(double v) { return base::units::bandwidth(v); }

Table compute_table(const pb::CalibrationProfile& profile) {
  Table compute({"device", "op class", "op", "samples", "max_efficiency", "half_saturation",
                 "memory_efficiency", "overhead", "median |err|", "max |err|"});
  for (const auto& c : profile.compute()) {
    const ParamText p(c.fit());
    compute.add_row({c.device(),
                     enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(c.op_class())),
                     op_label(c), std::to_string(c.fit().samples()),
                     p("max_efficiency", c.max_efficiency(), plain),
                     p("half_saturation_flops", c.half_saturation_flops(), flop),
                     p("memory_efficiency", c.memory_efficiency(), plain),
                     p("overhead_s", c.overhead_s(), secs), percent(c.fit().median_abs_rel_error()),
                     percent(c.fit().max_abs_rel_error())});
  }
  return compute;
}

Table comm_table(const pb::CalibrationProfile& profile) {
  Table comm(
      {"scope", "collective", "samples", "latency", "bandwidth", "median |err|", "max |err|"});
  for (const auto& c : profile.comm()) {
    const ParamText p(c.fit());
    comm.add_row(
        {c.scope(),
         c.collective() ==
                 pb::COLLECTIVE_KIND_UNSPECIFIED  // CollectiveCostModel::p2p_seconds's curve
             ? std::string("send/recv")
             : enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(c.collective())),
         std::to_string(c.fit().samples()), p("latency_s", c.latency_s(), secs),
         p("bandwidth_bytes_per_s", c.bandwidth_bytes_per_s(), bw),
         percent(c.fit().median_abs_rel_error()), percent(c.fit().max_abs_rel_error())});
  }
  return comm;
}

// Corrections by shape: how far the measured GEMM shapes sit from the curve (empty: none).
std::optional<Table> shape_table(const pb::CalibrationProfile& profile) {
  Table shapes(
      {"device", "op class", "op", "shapes", "samples", "time ratio min", "median", "max"});
  bool any_shapes = false;
  for (const auto& c : profile.compute()) {
    if (c.shape_points_size() == 0) continue;
    any_shapes = true;
    std::vector<double> ratios;
    int64_t samples = 0;
    for (const auto& p : c.shape_points()) ratios.push_back(p.time_ratio()), samples += p.samples();
    std::sort(ratios.begin(), ratios.end());
    shapes.add_row({c.device(),
                    enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(c.op_class())),
                    op_label(c), std::to_string(c.shape_points_size()), std::to_string(samples),
                    short_number(ratios.front()), short_number(ratios[ratios.size() / 2]),
                    short_number(ratios.back())});
  }
  if (!any_shapes) return std::nullopt;
  return shapes;
}

// Corrections by message size: the training runs' collectives against the curve (empty: none).
std::optional<Table> size_table(const pb::CalibrationProfile& profile) {
  Table sizes({"scope", "collective", "ranks", "size", "samples", "time ratio"});
  bool any_sizes = false;
  for (const auto& c : profile.comm()) {
    for (const auto& p : c.size_points()) {
      any_sizes = true;
      sizes.add_row(
          {c.scope(),
           enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(c.collective())),
           std::to_string(p.ranks()), base::units::bytes(p.bytes()), std::to_string(p.samples()),
           short_number(p.time_ratio())});
    }
  }
  if (!any_sizes) return std::nullopt;
  return sizes;
}

void print_tables(const pb::CalibrationProfile& profile, const std::string& out_file) {
  const Table compute = compute_table(profile), comm = comm_table(profile);
  const std::optional<Table> shapes = shape_table(profile), sizes = size_table(profile);
  std::cout << "wrote " << out_file << "\n\n";
  if (profile.compute_size() > 0) std::cout << compute.render() << "\n";
  if (shapes) {
    std::cout << "corrections by shape (measured time / curve time, per op shape and pass)\n"
              << shapes->render() << "\n";
  }
  if (profile.comm_size() > 0) std::cout << comm.render() << "\n";
  if (sizes) {
    std::cout << "corrections by message size (measured time / curve time, per size the training "
                 "runs issued "
                 "alone)\n"
              << sizes->render() << "\n";
  }
}

void print_slowdowns(const calibration::CalibrationFit& fit) {
  const calibration::OverlapReport& o = fit.overlap;
  if (o.fitted) {
    std::cout << "overlap slowdown: compute runs " << short_number(o.slowdown)
              << "x slower beside communication (median of " << o.samples
              << " ops overlapped for at least half their time; quartiles " << short_number(o.q1)
              << " - " << short_number(o.q3) << ")\n";
  } else {
    std::cout << "overlap slowdown not fitted: " << o.note << "\n";
  }
  const calibration::OverlapReport& oc = fit.overlap_comm;
  if (oc.fitted) {
    std::cout
        << "communication slowdown: collectives run " << short_number(oc.slowdown)
        << "x slower beside compute (median of " << oc.samples
        << " stretches of communication whose rank computed for at least half of them; quartiles "
        << short_number(oc.q1) << " - " << short_number(oc.q3) << ")\n\n";
  } else {
    std::cout << "communication slowdown not fitted: " << oc.note << "\n\n";
  }
}

void print_overheads(const calibration::CalibrationFit& fit) {
  for (const calibration::OverheadReport& b : fit.blocking) {
    if (b.fitted && b.split) {
      std::cout << "blocking collectives (" << b.subject << "): +"
                << base::units::seconds(b.per_collective_s) << " per collective and +"
                << base::units::seconds(b.value_s)
                << " per message round when issued in line with compute (the line through the "
                   "clipped mean "
                   "residuals over their curves at each round count, "
                << b.samples << " samples; per round, quartiles " << base::units::seconds(b.q1_s)
                << " - " << base::units::seconds(b.q3_s) << ")\n\n";
    } else if (b.fitted) {
      std::cout << "blocking collectives (" << b.subject << "): +"
                << base::units::seconds(b.value_s)
                << " per message round when issued in line with compute (clipped mean residual of "
                << b.samples << " over their curves, per round; quartiles "
                << base::units::seconds(b.q1_s) << " - " << base::units::seconds(b.q3_s) << ")\n\n";
    } else {
      std::cout << "blocking collectives (" << b.subject << ") not fitted: " << b.note << "\n\n";
    }
  }
  for (const calibration::OverheadReport& d : fit.dispatch) {
    if (d.fitted) {
      std::cout << "dispatch (" << d.subject << "): +" << base::units::seconds(d.value_s)
                << " before each op on the compute stream, time no op covers (clipped mean of "
                << d.samples << " ranks; quartiles " << base::units::seconds(d.q1_s) << " - "
                << base::units::seconds(d.q3_s) << ")\n\n";
    } else {
      std::cout << "dispatch (" << d.subject << ") not fitted: " << d.note << "\n\n";
    }
  }
}

void print_skew_and_sharing(const calibration::CalibrationFit& fit) {
  for (const calibration::SkewReport& k : fit.skew) {
    if (k.fitted) {
      std::cout << "rank skew (" << k.device << "): ";
      if (k.jitter_s > 0) std::cout << "jitter " << base::units::seconds(k.jitter_s) << " + ";
      std::cout << "cv " << short_number(k.cv)
                << (k.jitter_s > 0 ? " x the compute since"
                                   : ", a rank's compute between synchronizations varies this much")
                << " (waits beyond the fastest member at " << k.samples
                << " collectives; own cv quartiles " << short_number(k.q1) << " - "
                << short_number(k.q3) << ")\n\n";
    } else {
      std::cout << "rank skew (" << k.device << ") not fitted: " << k.note << "\n\n";
    }
  }
  for (const calibration::SharingReport& h : fit.sharing) {
    if (h.fitted) {
      std::cout << "host sharing (" << h.device << "): compute runs " << short_number(h.slowdown)
                << "x slower with " << h.ranks << " ranks on the host than alone (median over "
                << h.shapes << " op shapes measured both ways; quartiles " << short_number(h.q1)
                << " - " << short_number(h.q3) << ")\n\n";
    } else {
      std::cout << "host sharing (" << h.device << ") not fitted: " << h.note << "\n\n";
    }
  }
}

void print_held(const calibration::CalibrationFit& fit, const std::vector<std::string>& notes) {
  std::vector<std::pair<std::string, std::string>> held, kept;
  std::vector<std::pair<std::string, std::string>> class_kept;
  for (const auto* reports : {&fit.curves, &fit.op_curves}) {
    for (const auto& r : *reports) {
      const std::string subject =
          r.device_or_scope + " " + r.what + (r.op.empty() ? "" : " " + r.op);
      if (!r.fitted) (r.op.empty() ? kept : class_kept).emplace_back(subject, r.note);
      for (const auto& h : r.held)
        held.emplace_back(subject, h.name + " held at " + held_value(h) + ": " + h.reason);
    }
  }
  if (!held.empty())
    std::cout << "held (the samples cannot determine them)\n" << render_fields(held) << "\n";
  if (!kept.empty())
    std::cout << "left at the simulator's defaults\n" << render_fields(kept) << "\n";
  if (!class_kept.empty())
    std::cout << "ops left on their class's curve\n" << render_fields(class_kept) << "\n";
  if (!notes.empty()) {
    std::cout << "left out of the fit\n";
    for (const auto& n : notes) std::cout << "  " << n << "\n";
  }
}

void print_report(const pb::CalibrationProfile& profile, const calibration::CalibrationFit& fit,
                  const std::vector<std::string>& notes, const std::string& out_file) {
  print_tables(profile, out_file);
  print_slowdowns(fit);
  print_overheads(fit);
  print_skew_and_sharing(fit);
  print_held(fit, notes);
}

// The checkpoint storage bandwidths measured (calibration/checkpoint_fit.hpp), if any.
void print_checkpoint_storage(const calibration::CheckpointFit& storage) {
  if (storage.lines.empty()) return;
  Table t({"storage field", "samples", "median", "min", "max", "from"});
  std::vector<std::string> left_out;
  for (const auto& l : storage.lines) {
    if (l.field.empty()) {
      left_out.push_back(l.what);
      continue;
    }
    t.add_row({l.field, std::to_string(l.samples), bw(l.value), bw(l.min), bw(l.max), l.what});
  }
  std::cout
      << "\ncheckpoint storage (orrery goodput --calibration uses each field the cluster file "
         "leaves out)\n";
  if (storage.storage.ByteSizeLong() > 0) std::cout << t.render();
  for (const auto& w : left_out) std::cout << "  " << w << "\n";
}

nlohmann::ordered_json checkpoint_storage_json(const calibration::CheckpointFit& storage) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& l : storage.lines) {
    out.push_back({{"field", l.field},
                   {"samples", l.samples},
                   {"bytes_per_s", l.value},
                   {"min_bytes_per_s", l.min},
                   {"max_bytes_per_s", l.max},
                   {"what", l.what}});
  }
  return out;
}

void print_json(const pb::CalibrationProfile& profile, const calibration::CalibrationFit& fit,
                const calibration::CheckpointFit& storage, const std::vector<std::string>& notes,
                const std::string& out_file) {
  const auto reports = [](const std::vector<calibration::CurveReport>& from) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : from) {
      nlohmann::ordered_json held = nlohmann::ordered_json::array();
      for (const auto& h : r.held)
        held.push_back({{"param", h.name}, {"value", h.value}, {"reason", h.reason}});
      nlohmann::ordered_json j{{"subject", r.device_or_scope}, {"what", r.what}};
      if (!r.op.empty()) j["op"] = r.op;
      j["samples"] = r.samples, j["fitted"] = r.fitted, j["held"] = held;
      if (!r.note.empty()) j["note"] = r.note;
      out.push_back(j);
    }
    return out;
  };
  const nlohmann::ordered_json curves = reports(fit.curves), op_curves = reports(fit.op_curves);
  auto slowdown = [](const calibration::OverlapReport& r) {
    nlohmann::ordered_json e{{"samples", r.samples}, {"fitted", r.fitted}};
    if (r.fitted) {
      e["slowdown"] = r.slowdown;
      e["quartiles"] = {r.q1, r.q3};
    } else {
      e["note"] = r.note;
    }
    return e;
  };
  // A fitted per-event time: its subject and sample count, then its value and quartiles or why
  // it was not written.
  auto overhead = [](nlohmann::ordered_json e, bool fitted, const char* key, double value,
                     double q1, double q3, const std::string& note) {
    e["fitted"] = fitted;
    if (fitted) {
      e[key] = value;
      e["quartiles_s"] = {q1, q3};
    } else {
      e["note"] = note;
    }
    return e;
  };
  nlohmann::ordered_json blocking = nlohmann::ordered_json::array();
  for (const calibration::OverheadReport& b : fit.blocking) {
    nlohmann::ordered_json e{{"scope", b.subject}, {"samples", b.samples}};
    if (b.fitted) e["per_collective_s"] = b.per_collective_s;
    blocking.push_back(
        overhead(std::move(e), b.fitted, "per_round_s", b.value_s, b.q1_s, b.q3_s, b.note));
  }
  nlohmann::ordered_json dispatch = nlohmann::ordered_json::array();
  for (const calibration::OverheadReport& d : fit.dispatch) {
    dispatch.push_back(overhead({{"device", d.subject}, {"samples", d.samples}}, d.fitted,
                                "per_op_s", d.value_s, d.q1_s, d.q3_s, d.note));
  }
  nlohmann::ordered_json skew = nlohmann::ordered_json::array();
  for (const calibration::SkewReport& k : fit.skew) {
    nlohmann::ordered_json e{{"device", k.device}, {"samples", k.samples}, {"fitted", k.fitted}};
    if (k.fitted) {
      e["cv"] = k.cv;
      e["jitter_s"] = k.jitter_s;
      e["quartiles"] = {k.q1, k.q3};
    } else {
      e["note"] = k.note;
    }
    skew.push_back(e);
  }
  nlohmann::ordered_json sharing = nlohmann::ordered_json::array();
  for (const calibration::SharingReport& h : fit.sharing) {
    nlohmann::ordered_json e{
        {"device", h.device}, {"ranks", h.ranks}, {"shapes", h.shapes}, {"fitted", h.fitted}};
    if (h.fitted) {
      e["slowdown"] = h.slowdown;
      e["quartiles"] = {h.q1, h.q3};
    } else {
      e["note"] = h.note;
    }
    sharing.push_back(e);
  }
  nlohmann::ordered_json j{{"out", out_file},
                           {"profile", nlohmann::ordered_json::parse(to_json(profile))},
                           {"curves", curves},
                           {"op_curves", op_curves},
                           {"overlap", slowdown(fit.overlap)},
                           {"overlap_comm", slowdown(fit.overlap_comm)},
                           {"blocking", blocking},
                           {"dispatch", dispatch},
                           {"rank_skew", skew},
                           {"host_sharing", sharing},
                           {"checkpoint_storage", checkpoint_storage_json(storage)},
                           {"notes", notes}};
  std::cout << with_header("orrery.calibrate", j).dump(2) << "\n";
}

void calibrate(const CalibrateArgs& a, const OutputFlags& out) {
  if (a.comm_scope != "intra_node" && a.comm_scope != "inter_node") {
    throw base::InputError(
        "", 0, "--comm-scope",
        "got '" + a.comm_scope + "'" + base::suggest(a.comm_scope, {"intra_node", "inter_node"}));
  }
  if (!a.force && std::filesystem::exists(a.out_file)) {
    throw base::InputError(a.out_file, 0, "",
                           "refusing to overwrite an existing file (use --force)");
  }
  pb::ClusterSpec cluster;
  if (!a.cluster.empty()) cluster = topologies::load_cluster(a.cluster);
  calibration::SampleOptions options;
  options.device = a.device;
  options.cluster = a.cluster.empty() ? nullptr : &cluster;
  options.comm_scope = a.comm_scope;
  calibration::TraceSamples samples;
  std::vector<calibration::CheckpointSample> checkpoints;
  std::vector<std::string> notes;
  check_trace_memory(a.traces, "--traces", host_memory_limit(a.host_memory));
  for (const auto& file : a.traces) {
    std::cerr << "calibrate: reading " << file << "\n";
    const pb::ExecGraph trace = read_measured_trace(file, notes);
    calibration::add_trace_samples(trace, file, options, samples);
    calibration::add_checkpoint_samples(trace, file, checkpoints, notes);
  }
  notes.insert(notes.end(), samples.notes.begin(), samples.notes.end());
  if (samples.compute.empty() && samples.comm.empty()) {
    throw base::InputError("", 0, "--traces",
                           "no timed compute op or collective in the traces to fit");
  }
  const calibration::CheckpointFit storage = calibration::fit_checkpoint_storage(checkpoints);
  calibration::FitOptions fit_options;
  fit_options.min_samples = a.min_samples;
  calibration::CalibrationFit fit =
      calibration::fit_calibration(samples.compute, samples.comm, samples.devices, fit_options);
  calibration::fit_overlap_comm_slowdown(samples.overlapped_comm, fit_options, fit);
  calibration::fit_dispatch_overheads(samples.dispatch, fit_options, fit);
  calibration::fit_rank_skew(samples.skew, fit_options, fit);
  if (fit.profile.compute_size() == 0 && fit.profile.comm_size() == 0) {
    throw base::InputError("", 0, "--traces",
                           "no curve has " + std::to_string(a.min_samples) +
                               " samples (--min-samples): nothing to calibrate");
  }
  pb::CalibrationProfile profile;
  profile.set_name(a.name.empty() ? std::filesystem::path(a.out_file).stem().string() : a.name);
  for (const auto& file : a.traces) profile.add_sources(file);
  profile.MergeFrom(fit.profile);
  if (storage.storage.ByteSizeLong() > 0) *profile.mutable_checkpoint_storage() = storage.storage;
  const bool json_file = std::filesystem::path(a.out_file).extension() == ".json";
  write_file_atomically(a.out_file, json_file ? to_json(profile) : to_yaml(profile), a.force);
  if (out.json) {
    print_json(profile, fit, storage, notes, a.out_file);
  } else {
    print_report(profile, fit, notes, a.out_file);
    print_checkpoint_storage(storage);
  }
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  auto out = std::make_shared<OutputFlags>();
  CLI::App* cmd = app.add_subcommand("calibrate", kCalibrateHelp);
  cmd->add_option("--traces", a->traces,
                  "Measured traces: orrery bench --out files, orrery run --out DIR/trace.json, "
                  "PyTorch profiler JSON")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--out", a->out_file, "The calibration profile to write (.json or YAML)")
      ->required();
  cmd->add_option(
      "--device", a->device,
      "Device the traces ran on (replaces the traces' own; needed for profiler traces)");
  cmd->add_option("--cluster", a->cluster,
                  "Cluster (preset, file, or local) whose devices resolve device names of traces "
                  "that carry no cluster");
  cmd->add_option(
      "--comm-scope", a->comm_scope,
      "Scope of collectives in traces that carry no cluster: intra_node (default) or inter_node");
  cmd->add_option("--name", a->name, "Profile name (default: the --out file's stem)");
  cmd->add_option("--min-samples", a->min_samples, "Samples a curve needs to be fitted (default 3)")
      ->check(CLI::Range(int64_t{2}, int64_t{1000000}));
  cmd->add_flag("--force", a->force, "Replace --out if it exists");
  cmd->add_option("--host-memory", a->host_memory,
                  "Memory the traces may take while read (a size, \"8 GiB\"; default: what "
                  "/proc/meminfo calls available)");
  add_output_flags(cmd, *out, false);
  cmd->callback([a, out] { calibrate(*a, *out); });
}

}  // namespace orrery::cli
