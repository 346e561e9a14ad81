#include "orrery/planner/layer_partition.hpp"

#include <gtest/gtest.h>

namespace orrery::planner {
namespace {

TEST(LayerPartition, UniformLayersSplitEvenly) {
  const std::vector<double> layers(8, 1.0);
  EXPECT_EQ(partition_layers(layers, {0, 0, 0, 0}, {1, 1, 1, 1}),
            (std::vector<int64_t>{2, 2, 2, 2}));
}

TEST(LayerPartition, FasterStageTakesMoreLayers) {
  // 6 unit layers on speeds 1 and 2: 2 + 4 layers gives both stages time 2 (any other split
  // leaves one stage at >= 2.5 or 3).
  const std::vector<double> layers(6, 1.0);
  EXPECT_EQ(partition_layers(layers, {0, 0}, {1, 2}), (std::vector<int64_t>{2, 4}));
  EXPECT_DOUBLE_EQ(slowest_stage({2, 4}, layers, {0, 0}, {1, 2}), 2.0);
}

TEST(LayerPartition, HeadShiftsLayersOffTheLastStage) {
  // 10 unit layers on 4 stages, the head (1.5 layers of work) on the last: 11.5 / 4 = 2.875, so
  // the slowest stage takes >= 3; the last stage reaches <= 3 only with 1 layer (2 + 1.5 = 3.5),
  // leaving 9 layers for 3 stages: 3,3,3,1 is the unique optimum.
  const std::vector<double> layers(10, 1.0);
  const std::vector<double> extra = {0, 0, 0, 1.5};
  EXPECT_EQ(partition_layers(layers, extra, {1, 1, 1, 1}), (std::vector<int64_t>{3, 3, 3, 1}));
}

TEST(LayerPartition, MatchesBruteForceOnSmallCases) {
  const std::vector<double> layers = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::vector<double> extra = {1, 0, 2};
  const std::vector<double> speed = {1, 2, 1.5};
  double best = 1e300;
  for (int64_t a = 1; a <= 6; ++a) {
    for (int64_t b = 1; a + b <= 7; ++b) {
      best = std::min(best, slowest_stage({a, b, 8 - a - b}, layers, extra, speed));
    }
  }
  EXPECT_DOUBLE_EQ(slowest_stage(partition_layers(layers, extra, speed), layers, extra, speed),
                   best);
}

}  // namespace
}  // namespace orrery::planner
