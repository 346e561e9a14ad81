#include "measured_trace.hpp"

#include <set>

#include "orrery/base/statistics.hpp"

namespace orrery::executor {

std::vector<size_t> measured_steps(size_t steps) {
  std::vector<size_t> out;
  for (size_t i = steps > 1 ? 1 : 0; i < steps; ++i) out.push_back(i);
  return out;
}

std::vector<size_t> kept_steps(const std::vector<double>& step_seconds, size_t steps) {
  const auto used = measured_steps(steps);
  if (step_seconds.size() != steps) return used;
  std::vector<double> seconds;
  for (size_t i : used) seconds.push_back(step_seconds[i]);
  std::vector<size_t> kept;
  for (size_t k : base::within_clip(seconds)) kept.push_back(used[k]);
  return kept;
}

std::string fill_measured(pb::RankGraph& graph, const std::vector<StepTimings>& steps,
                          const std::vector<double>& untimed_s,
                          const std::vector<double>& step_seconds, size_t limit) {
  std::set<std::string> in_graph;
  for (const auto& n : graph.nodes()) in_graph.insert(n.name());
  std::set<std::string> extra, missing;
  for (const auto& step : steps) {
    for (const auto& [name, t] : step) {
      if (in_graph.count(name) == 0) extra.insert(name);
    }
    for (const auto& name : in_graph) {
      if (step.count(name) == 0) missing.insert(name);
    }
  }
  std::string problems;
  auto list = [&](const std::set<std::string>& names, const char* what) {
    size_t shown = 0;
    for (const auto& n : names) {
      if (shown++ == limit) {
        problems += std::string(what) + ": ... (" + std::to_string(names.size()) + " in all)\n";
        break;
      }
      problems += std::string(what) + ": " + n + "\n";
    }
  };
  list(extra, "ran but not in the graph");
  list(missing, "in the graph but never ran");
  if (!problems.empty()) return problems;

  // Means over the steps a clipped mean of the step time keeps: on shared cores one descheduled
  // step would move a plain mean, and medians do not add up to the step (see statistics.hpp).
  if (steps.empty()) return "";
  const auto kept = kept_steps(step_seconds, steps.size());
  auto mean = [&](auto value) {
    double sum = 0;
    for (size_t i : kept) sum += value(i);
    return sum / static_cast<double>(kept.size());
  };
  if (untimed_s.size() == steps.size())
    graph.set_untimed_s(mean([&](size_t i) { return untimed_s[i]; }));
  const size_t last = measured_steps(steps.size()).back();
  for (auto& n : *graph.mutable_nodes()) {
    n.set_start_s(mean([&](size_t i) { return steps[i].at(n.name()).start_s; }));
    n.set_duration_s(mean([&](size_t i) { return steps[i].at(n.name()).duration_s; }));
    if (const auto& a = steps[last].at(n.name()).algorithm; !a.empty()) n.set_algorithm(a);
    if (const auto& d = steps[last].at(n.name()).dtype; !d.empty()) n.set_dtype(d);
  }
  return "";
}

}  // namespace orrery::executor
