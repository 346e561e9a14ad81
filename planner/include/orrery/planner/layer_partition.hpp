// Non-uniform layer partition: contiguous runs of decoder layers per pipeline stage chosen by
// dynamic programming over layers, so that the slowest stage is as fast as it can be when stages
// differ in speed (heterogeneous node groups) or in fixed work (the embedding on the first
// stage, the LM head and loss on the last).
#pragma once

#include <cstdint>
#include <vector>

namespace orrery::planner {

// Layers of each stage (every stage >= 1 layer, summing to layer_cost.size()) minimizing
//   max_s (extra_cost[s] + sum of layer_cost over stage s's layers) / speed[s].
// Among equally good splits, the one giving earlier stages fewer layers is returned (earlier
// stages hold more in-flight micro-batches under 1F1B). Exact; O(stages x layers^2).
std::vector<int64_t> partition_layers(const std::vector<double>& layer_cost,
                                      const std::vector<double>& extra_cost,
                                      const std::vector<double>& speed);

// The slowest stage's time for a given split (the objective above).
double slowest_stage(const std::vector<int64_t>& split, const std::vector<double>& layer_cost,
                     const std::vector<double>& extra_cost, const std::vector<double>& speed);

}  // namespace orrery::planner
