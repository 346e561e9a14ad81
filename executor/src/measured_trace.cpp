#include "measured_trace.hpp"

#include <set>

#include "orrery/traces/statistics.hpp"

namespace orrery::executor {

std::vector<size_t> measured_steps(size_t steps) {
  std::vector<size_t> out;
  for (size_t i = steps > 1 ? 1 : 0; i < steps; ++i) out.push_back(i);
  return out;
}

std::string fill_measured(pb::RankGraph& graph, const std::vector<StepTimings>& steps,
                          const std::vector<double>& untimed_s, size_t limit) {
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

  // Clipped means over the measured steps: on shared cores one descheduled step would move a
  // plain mean, and medians do not add up to the step (see statistics.hpp).
  const auto used = measured_steps(steps.size());
  if (untimed_s.size() == steps.size()) {
    std::vector<double> untimed;
    for (size_t i : used) untimed.push_back(untimed_s[i]);
    graph.set_untimed_s(clipped_mean(untimed));
  }
  for (auto& n : *graph.mutable_nodes()) {
    std::vector<double> starts, durations;
    for (size_t i : used) {
      const OpTiming& t = steps[i].at(n.name());
      starts.push_back(t.start_s);
      durations.push_back(t.duration_s);
    }
    n.set_start_s(clipped_mean(starts));
    n.set_duration_s(clipped_mean(durations));
    if (const auto& a = steps[used.back()].at(n.name()).algorithm; !a.empty()) n.set_algorithm(a);
    if (const auto& d = steps[used.back()].at(n.name()).dtype; !d.empty()) n.set_dtype(d);
  }
  return "";
}

}  // namespace orrery::executor
