#include <gtest/gtest.h>

#include <cmath>

#include "orrery/base/statistics.hpp"

namespace orrery::base {
namespace {

TEST(Statistics, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(base::median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(base::median({4, 1, 3, 2}), 2.5);  // the mean of the two middle values
  EXPECT_DOUBLE_EQ(base::median({7}), 7);
}

TEST(Statistics, MedianIgnoresOneOutlierWhereTheMeanDoesNot) {
  // Nine steps of 1 s and one descheduled step of 3 s: the mean moves by 20%, the median not.
  std::vector<double> steps(9, 1.0);
  steps.push_back(3.0);
  EXPECT_DOUBLE_EQ(base::median(steps), 1.0);
}

TEST(Statistics, MedianOfNothingIsNaN) { EXPECT_TRUE(std::isnan(base::median({}))); }

TEST(Statistics, ClippedMeanDropsTheDescheduledStepAndKeepsTheSpread) {
  // Op times that lean right (1.0-1.4 s) and one descheduled step (5 s): the median (1.1)
  // falls short of what the steps take on average, the plain mean is pulled up by the outlier;
  // the clipped mean is the mean of the six others.
  const std::vector<double> v{1.0, 1.0, 1.0, 1.1, 1.3, 1.4, 5.0};
  EXPECT_DOUBLE_EQ(base::clipped_mean(v), (1.0 + 1.0 + 1.0 + 1.1 + 1.3 + 1.4) / 6);
  EXPECT_GT(base::clipped_mean(v), base::median(v) + 0.03);
}

// Closed forms: E[max of 2] = 1 / sqrt(pi), E[max of 3] = 3 / (2 sqrt(pi)); 4 and 8 from the
// tables of normal order statistics (Harter 1961).
TEST(Statistics, ExpectedMaximumOfNormals) {
  EXPECT_EQ(base::expected_max_of_normals(0), 0);
  EXPECT_EQ(base::expected_max_of_normals(1), 0);
  EXPECT_NEAR(base::expected_max_of_normals(2), 1 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(base::expected_max_of_normals(3), 1.5 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(base::expected_max_of_normals(4), 1.02937537, 1e-8);
  EXPECT_NEAR(base::expected_max_of_normals(8), 1.42360031, 1e-8);
  // It grows like sqrt(2 ln n): slowly, but without bound.
  double last = 0;
  for (int64_t n : {16, 256, 4096, 65536}) {
    const double e = base::expected_max_of_normals(n);
    EXPECT_GT(e, last);
    EXPECT_LT(e, std::sqrt(2 * std::log(static_cast<double>(n))));
    last = e;
  }
}

TEST(Statistics, ClippedMeanIsTheMeanWithoutOutliers) {
  EXPECT_DOUBLE_EQ(base::clipped_mean({1, 2, 3, 4}), 2.5);
  EXPECT_DOUBLE_EQ(base::clipped_mean({2, 2, 2, 9}), 3.75);  // MAD 0: every value
  EXPECT_DOUBLE_EQ(base::clipped_mean({7}), 7);
  EXPECT_TRUE(std::isnan(base::clipped_mean({})));
}

}  // namespace
}  // namespace orrery::base
