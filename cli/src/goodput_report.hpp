// `orrery goodput`'s output: the readable report and its JSON form, from one set of figures.
#pragma once

#include <cstdint>
#include <string>

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
};

std::string render_goodput(const GoodputFigures& f);
nlohmann::ordered_json goodput_json(const GoodputFigures& f);

}  // namespace orrery::cli
