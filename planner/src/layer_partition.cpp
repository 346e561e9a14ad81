#include "orrery/planner/layer_partition.hpp"

#include <algorithm>
#include <limits>

#include "orrery/base/error.hpp"

namespace orrery::planner {
namespace {

// Time of stage s holding layers [from, to) given prefix sums of the layer costs.
double stage_time(const std::vector<double>& prefix, const std::vector<double>& extra,
                  const std::vector<double>& speed, size_t s, size_t from, size_t to) {
  return (extra[s] + prefix[to] - prefix[from]) / speed[s];
}

bool within(double value, double bound) { return value <= bound * (1 + 1e-12); }

}  // namespace

std::vector<int64_t> partition_layers(const std::vector<double>& layer_cost,
                                      const std::vector<double>& extra_cost,
                                      const std::vector<double>& speed) {
  const size_t layers = layer_cost.size(), stages = speed.size();
  ORRERY_CHECK(stages >= 1 && extra_cost.size() == stages, "one extra cost and speed per stage");
  ORRERY_CHECK(layers >= stages, "every stage needs a layer");
  for (double v : speed) ORRERY_CHECK(v > 0, "stage speeds must be positive");
  std::vector<double> prefix(layers + 1, 0);
  for (size_t i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + layer_cost[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][i]: the slowest of stages 0..s when they hold the first i layers.
  std::vector<std::vector<double>> best(stages, std::vector<double>(layers + 1, kInf));
  for (size_t i = 1; i <= layers; ++i) best[0][i] = stage_time(prefix, extra_cost, speed, 0, 0, i);
  for (size_t s = 1; s < stages; ++s) {
    for (size_t i = s + 1; i <= layers; ++i) {
      for (size_t j = s; j < i; ++j) {
        const double t = std::max(best[s - 1][j], stage_time(prefix, extra_cost, speed, s, j, i));
        best[s][i] = std::min(best[s][i], t);
      }
    }
  }
  const double target = best[stages - 1][layers];
  // Walk back: each stage starts as early as the optimum allows (later stages take more layers).
  std::vector<int64_t> split(stages, 0);
  size_t end = layers;
  for (size_t s = stages - 1; s > 0; --s) {
    size_t start = s;
    while (!(within(best[s - 1][start], target) &&
             within(stage_time(prefix, extra_cost, speed, s, start, end), target))) {
      ++start;
      ORRERY_CHECK(start < end, "layer partition lost its optimum");
    }
    split[s] = static_cast<int64_t>(end - start);
    end = start;
  }
  split[0] = static_cast<int64_t>(end);
  return split;
}

double slowest_stage(const std::vector<int64_t>& split, const std::vector<double>& layer_cost,
                     const std::vector<double>& extra_cost, const std::vector<double>& speed) {
  double slowest = 0;
  size_t first = 0;
  for (size_t s = 0; s < split.size(); ++s) {
    double work = extra_cost[s];
    for (int64_t l = 0; l < split[s]; ++l) work += layer_cost[first++];
    slowest = std::max(slowest, work / speed[s]);
  }
  return slowest;
}

}  // namespace orrery::planner
