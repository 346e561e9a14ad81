// Small order statistics shared by the executor (measured traces, microbenchmarks) and the
// simulator's fits. Wall-clock timings on shared machines have heavy upper tails (a descheduled
// thread, a page fault), so a plain mean is never used: microbenchmarks and fits take medians,
// and a measured trace's op timings take clipped means, which resist the outliers as a median does
// but still add up (the sum of the ops' medians falls short of the median step when the ops'
// times lean right, and a simulator adds op times).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace orrery {

// The median of `v` (the mean of the two middle values when there is an even number); NaN when
// `v` is empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The mean of the values within `k` scaled median absolute deviations (1.4826 MAD: one standard
// deviation for normal data) of the median; all values when the MAD is 0. NaN when `v` is empty.
inline double clipped_mean(const std::vector<double>& v, double k = 3.0) {
  if (v.empty()) return std::nan("");
  const double m = median(v);
  std::vector<double> deviations;
  for (double x : v) deviations.push_back(std::abs(x - m));
  const double bound = k * 1.4826 * median(deviations);
  double sum = 0;
  size_t n = 0;
  for (double x : v) {
    if (bound > 0 && std::abs(x - m) > bound) continue;
    sum += x, ++n;
  }
  return sum / static_cast<double>(n);
}

}  // namespace orrery
