#include "sweep_axes.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "orrery/base/error.hpp"
#include "orrery/topologies/device_db.hpp"
#include "text.hpp"

namespace orrery::cli {
namespace {

// The cluster axes: the device type, then scales of link bandwidths and latencies.
constexpr const char* kDeviceAxis = "device";
const std::vector<std::string>& cluster_axes() {
  static const std::vector<std::string> names = {kDeviceAxis, "nic-bandwidth", "nic-latency",
                                                 "link-bandwidth", "link-latency"};
  return names;
}

// The plan flags a sweep may vary: every flag add_plan_flags knows but --plan (the base job).
std::vector<std::string> plan_axes() {
  CLI::App app;
  PlanArgs args;
  add_plan_flags(&app, args);
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& name : o->get_lnames()) {
      if (name != "plan" && name != "help") names.push_back(name);
    }
  }
  return names;
}

double parse_scale(const std::string& axis, const std::string& value) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && std::isfinite(v) && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw base::InputError("", 0, "--vary",
                         axis + ": got '" + value + "', expected a positive scale (2 = twice)");
}

SweepAxis parse_axis(const std::string& text, const std::vector<std::string>& plan_names) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) {
    throw base::InputError("", 0, "--vary",
                           "got '" + text + "', expected NAME=V1,V2,... (e.g. nodes=8,16,32)");
  }
  SweepAxis axis{text.substr(0, eq), split_commas(text.substr(eq + 1)), false};
  const auto& cluster = cluster_axes();
  axis.changes_cluster = std::count(cluster.begin(), cluster.end(), axis.name) > 0;
  if (!axis.changes_cluster && std::count(plan_names.begin(), plan_names.end(), axis.name) == 0) {
    std::vector<std::string> known = cluster;
    known.insert(known.end(), plan_names.begin(), plan_names.end());
    throw base::InputError("", 0, "--vary",
                           "'" + axis.name +
                               "' is not an axis: a sweep varies a plan flag (nodes, tp, "
                               "global-batch, seq, ...) or device, nic-bandwidth, nic-latency, "
                               "link-bandwidth, link-latency" +
                               base::suggest(axis.name, known));
  }
  std::set<std::string> seen;
  for (const auto& v : axis.values) {
    if (v.empty()) throw base::InputError("", 0, "--vary", axis.name + ": an empty value");
    if (!seen.insert(v).second)
      throw base::InputError("", 0, "--vary", axis.name + ": '" + v + "' given twice");
    if (axis.changes_cluster && axis.name != kDeviceAxis) parse_scale(axis.name, v);
  }
  if (axis.values.empty()) throw base::InputError("", 0, "--vary", axis.name + ": no values");
  return axis;
}

void scale_link(pb::LinkSpec* link, double bandwidth, double latency) {
  link->set_bandwidth_bytes_per_s(link->bandwidth_bytes_per_s() * bandwidth);
  link->set_latency_s(link->latency_s() * latency);
}

}  // namespace

std::vector<SweepAxis> parse_axes(const std::vector<std::string>& texts, const CLI::App& cmd) {
  if (texts.empty() || texts.size() > 2) {
    throw base::InputError("", 0, "--vary",
                           "got " + std::to_string(texts.size()) +
                               " axes; a sweep varies one or two (--vary NAME=V1,V2,...)");
  }
  const std::vector<std::string> plan_names = plan_axes();
  std::vector<SweepAxis> axes;
  for (const auto& text : texts) {
    axes.push_back(parse_axis(text, plan_names));
    const SweepAxis& axis = axes.back();
    if (axes.size() == 2 && axes[0].name == axis.name)
      throw base::InputError("", 0, "--vary", axis.name + ": varied twice");
    if (!axis.changes_cluster && cmd.count("--" + axis.name) > 0) {
      throw base::InputError(
          "", 0, "--vary",
          axis.name + ": --" + axis.name + " is given too; vary it or fix it, not both");
    }
  }
  return axes;
}

void apply_plan_axis(const SweepAxis& axis, const std::string& value, PlanArgs& args) {
  // The flag's own parser and checks, on a parser bound to this point's copy of the flags.
  CLI::App app;
  add_plan_flags(&app, args);
  std::vector<std::string> argv = {"--" + axis.name + "=" + value};
  try {
    app.parse(argv);
  } catch (const CLI::ParseError& e) {
    throw base::InputError("", 0, "--vary", axis.name + "=" + value + ": " + e.what());
  }
}

void apply_cluster_axis(const SweepAxis& axis, const std::string& value, pb::ClusterSpec& cluster) {
  if (axis.name == kDeviceAxis) {
    if (topologies::lookup_device(cluster, value) == nullptr) {
      // simulate_point names --vary and the point.
      throw base::InputError(
          "", 0, "",
          "device: got '" + value + "'" + base::suggest(value, topologies::device_names(cluster)));
    }
    for (auto& t : *cluster.mutable_node_types()) t.set_device(value);
    return;
  }
  const double s = parse_scale(axis.name, value);
  const bool bandwidth = axis.name.ends_with("-bandwidth");
  const double bw = bandwidth ? s : 1, lat = bandwidth ? 1 : s;
  if (axis.name.starts_with("link-")) {
    // The intra-node device link (NVLink/NVSwitch, Infinity Fabric).
    for (auto& t : *cluster.mutable_node_types()) {
      if (t.intra().has_device_link())
        scale_link(t.mutable_intra()->mutable_device_link(), bw, lat);
    }
    return;
  }
  // The scale-out network: every NIC, the switch links, and the per-hop and per-message latency.
  for (auto& t : *cluster.mutable_node_types()) {
    if (!t.has_nic()) continue;
    scale_link(t.mutable_nic()->mutable_link(), bw, lat);
    if (!t.nic().has_transport()) continue;
    auto* transport = t.mutable_nic()->mutable_transport();
    if (transport->has_message_latency_s())
      transport->set_message_latency_s(transport->message_latency_s() * lat);
  }
  auto* fabric = cluster.mutable_fabric();
  if (fabric->has_switch_link()) scale_link(fabric->mutable_switch_link(), bw, lat);
  fabric->set_switch_latency_s(fabric->switch_latency_s() * lat);
}

}  // namespace orrery::cli
