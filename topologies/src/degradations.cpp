#include "orrery/topologies/degradations.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"

namespace orrery::topologies {
namespace {

// The components the goodput footprint counts (sim/goodput footprint.hpp).
constexpr std::array<std::string_view, 5> kComponents = {"gpu", "host", "nic", "link", "switch"};

// What is wrong with one entry, and in which of its fields ("" when none).
struct Problem {
  std::string field, reason;
};

Problem problem_of(const pb::Degradation& d) {
  bool known = false;
  for (auto c : kComponents) known = known || d.component() == c;
  if (!known) {
    return {"component", "got '" + d.component() + "', expected gpu, host, nic, link or switch"};
  }
  if (!d.has_mean_interval_s()) {
    return {"mean_interval_s", "required: the mean time between episodes of one " + d.component() +
                                   " (no published rate exists to default it)"};
  }
  if (!(d.mean_interval_s() > 0) || !std::isfinite(d.mean_interval_s())) {
    return {"mean_interval_s",
            "expected a finite value > 0, got " + base::units::number(d.mean_interval_s())};
  }
  if (!d.has_step_ratio())
    return {"step_ratio", "required: the degraded step over the healthy one"};
  if (!(d.step_ratio() >= 1) || !std::isfinite(d.step_ratio())) {
    return {"step_ratio", "a degraded step is slower: must be a finite value >= 1, got " +
                              base::units::number(d.step_ratio())};
  }
  if (d.has_detect_steps() == d.has_duration_s()) {
    return {"",
            "give exactly one of detect_steps (a detector drains the node after that many "
            "slow steps) and duration_s (no detector: the episode lasts that long)"};
  }
  if (d.has_detect_steps() && d.detect_steps() <= 0) {
    return {"detect_steps", "expected a value > 0, got " + std::to_string(d.detect_steps())};
  }
  if (d.has_duration_s() && (!(d.duration_s() > 0) || !std::isfinite(d.duration_s()))) {
    return {"duration_s",
            "expected a finite value > 0, got " + base::units::number(d.duration_s())};
  }
  return {};
}

std::string at(int i) { return "failures.degradations[" + std::to_string(i) + "]"; }

}  // namespace

void check_degradations(const pb::ClusterSpec& cluster, const SourceMap& where) {
  const auto& list = cluster.failures().degradations();
  for (int i = 0; i < list.size(); ++i) {
    const Problem p = problem_of(list[i]);
    if (!p.reason.empty()) where.fail(p.field.empty() ? at(i) : at(i) + "." + p.field, p.reason);
    for (int j = 0; j < i; ++j) {
      if (list[j].component() == list[i].component()) {
        where.fail(at(i) + ".component", "'" + list[i].component() + "' is already listed in " +
                                             at(j) + ": give one entry per component");
      }
    }
  }
}

namespace {

double value_of(const std::string& key, const std::string& value, base::units::Unit unit,
                const std::string& flag, const std::string& text) {
  try {
    return base::units::parse(value, unit);
  } catch (const std::invalid_argument& e) {
    throw base::InputError("", 0, flag, "got '" + text + "': " + key + ": " + e.what());
  }
}

void set_key(pb::Degradation& d, const std::string& pair, const std::string& flag,
             const std::string& text) {
  const size_t eq = pair.find('=');
  const std::string key = pair.substr(0, eq);
  const std::string value = eq == std::string::npos ? std::string() : pair.substr(eq + 1);
  using base::units::Unit;
  if (key == "mean_interval_s") {
    d.set_mean_interval_s(value_of(key, value, Unit::kSeconds, flag, text));
  } else if (key == "step_ratio") {
    d.set_step_ratio(value_of(key, value, Unit::kNone, flag, text));
  } else if (key == "duration_s") {
    d.set_duration_s(value_of(key, value, Unit::kSeconds, flag, text));
  } else if (key == "detect_steps") {
    const double steps = value_of(key, value, Unit::kNone, flag, text);
    if (steps != std::floor(steps) || !(std::abs(steps) < 1e15)) {
      throw base::InputError("", 0, flag,
                             "got '" + text + "': detect_steps: expected a whole number");
    }
    d.set_detect_steps(static_cast<int64_t>(steps));
  } else {
    throw base::InputError(
        "", 0, flag,
        "got '" + text + "': unknown key '" + key +
            "' (expected mean_interval_s, step_ratio, detect_steps, duration_s)");
  }
}

}  // namespace

void set_degradation(pb::ClusterSpec& cluster, const std::string& text, const std::string& flag) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    throw base::InputError("", 0, flag,
                           "got '" + text +
                               "', expected COMPONENT:mean_interval_s=T,step_ratio=R,"
                               "detect_steps=N (or duration_s=D)");
  }
  pb::Degradation d;
  d.set_component(text.substr(0, colon));
  std::string rest = text.substr(colon + 1);
  for (size_t start = 0; start <= rest.size();) {
    const size_t comma = std::min(rest.find(',', start), rest.size());
    set_key(d, rest.substr(start, comma - start), flag, text);
    start = comma + 1;
  }
  const Problem p = problem_of(d);
  if (!p.reason.empty()) {
    throw base::InputError(
        "", 0, flag, "got '" + text + "': " + (p.field.empty() ? "" : p.field + ": ") + p.reason);
  }
  auto* list = cluster.mutable_failures()->mutable_degradations();
  for (auto& existing : *list) {
    if (existing.component() == d.component()) {
      existing = d;
      return;
    }
  }
  *list->Add() = d;
}

}  // namespace orrery::topologies
