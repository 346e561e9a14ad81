// `orrery goodput`'s output: the readable report and its JSON form, from one set of figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orrery/sim/footprint.hpp"
#include "orrery/sim/goodput.hpp"

namespace orrery::cli {

struct GoodputFigures {
  std::string model, cluster;
  sim::Footprint footprint;
  std::string engine = "analytic";  // the engine analytic_step_s comes from
  double analytic_step_s = 0;       // the failure-free step, by `engine`
  double straggler_factor = 1;
  std::string straggler_source = "none";  // PlanRun::straggler_source
  double tokens_per_step = 0;
  sim::RunModel run;
  sim::CheckpointInterval chosen, optimal;
  bool auto_interval = true;
  sim::MonteCarloResult monte_carlo;
  uint64_t seed = 0;
  double target_tokens = 0;
  // Components whose degradation entry a --degradation flag set (the rest: the cluster file).
  std::vector<std::string> degradation_flags;
};

// Why no degradation is modelled when the cluster states none (printed and in --json).
inline constexpr const char* kNoDegradations =
    "none modelled: no published rate of degradation episodes (slow GPUs, degraded links) exists "
    "to default them; state them in the cluster file (failures.degradations) or with "
    "--degradation";

// Where a degradation entry came from: "--degradation" or "cluster file".
std::string degradation_source(const GoodputFigures& f, const std::string& component);
// Wall time one episode of `d` costs (slow steps and, with a detector, the drain).
double degradation_cost_s(const sim::RunModel& run, const sim::Degradation& d);

std::string render_goodput(const GoodputFigures& f);
nlohmann::ordered_json goodput_json(const GoodputFigures& f);

}  // namespace orrery::cli
