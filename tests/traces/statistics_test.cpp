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

}  // namespace
}  // namespace orrery
