#include <gtest/gtest.h>

#include <cmath>

#include "orrery/traces/statistics.hpp"

namespace orrery {
namespace {

TEST(Statistics, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);  // the mean of the two middle values
  EXPECT_DOUBLE_EQ(median({7}), 7);
}

TEST(Statistics, MedianIgnoresOneOutlierWhereTheMeanDoesNot) {
  // Nine steps of 1 s and one descheduled step of 3 s: the mean moves by 20%, the median not.
  std::vector<double> steps(9, 1.0);
  steps.push_back(3.0);
  EXPECT_DOUBLE_EQ(median(steps), 1.0);
}

TEST(Statistics, MedianOfNothingIsNaN) { EXPECT_TRUE(std::isnan(median({}))); }

TEST(Statistics, ClippedMeanDropsTheDescheduledStepAndKeepsTheSpread) {
  // Op times that lean right (1.0-1.4 s) and one descheduled step (5 s): the median (1.1)
  // falls short of what the steps take on average, the plain mean is pulled up by the outlier;
  // the clipped mean is the mean of the six others.
  const std::vector<double> v{1.0, 1.0, 1.0, 1.1, 1.3, 1.4, 5.0};
  EXPECT_DOUBLE_EQ(clipped_mean(v), (1.0 + 1.0 + 1.0 + 1.1 + 1.3 + 1.4) / 6);
  EXPECT_GT(clipped_mean(v), median(v) + 0.03);
}

TEST(Statistics, ClippedMeanIsTheMeanWithoutOutliers) {
  EXPECT_DOUBLE_EQ(clipped_mean({1, 2, 3, 4}), 2.5);
  EXPECT_DOUBLE_EQ(clipped_mean({2, 2, 2, 9}), 3.75);  // MAD 0: every value
  EXPECT_DOUBLE_EQ(clipped_mean({7}), 7);
  EXPECT_TRUE(std::isnan(clipped_mean({})));
}

}  // namespace
}  // namespace orrery
