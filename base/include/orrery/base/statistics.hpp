// Small order statistics shared by the executor (measured traces, microbenchmarks) and the
// simulator's fits. Wall-clock timings on shared machines have heavy upper tails (a descheduled
// thread, a page fault), so a plain mean is never used: microbenchmarks and fits take medians,
// and a measured trace's step and op timings are means over the steps a clipped mean of the step
// time keeps, which resist the outliers as a median does but still add up (the sum of the ops'
// medians falls short of the median step when the ops' times lean right, and a simulator adds op
// times).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace orrery::base {

// The median of `v` (the mean of the two middle values when there is an even number); NaN when
// `v` is empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The positions of the values within `k` scaled median absolute deviations (1.4826 MAD: one
// standard deviation for normal data) of the median; all of them when the MAD is 0.
inline std::vector<size_t> within_clip(const std::vector<double>& v, double k = 3.0) {
  std::vector<size_t> kept;
  if (v.empty()) return kept;
  const double m = median(v);
  std::vector<double> deviations;
  for (double x : v) deviations.push_back(std::abs(x - m));
  const double bound = k * 1.4826 * median(deviations);
  for (size_t i = 0; i < v.size(); ++i) {
    if (bound <= 0 || std::abs(v[i] - m) <= bound) kept.push_back(i);
  }
  return kept;
}

// The mean of the values within_clip keeps. NaN when `v` is empty.
inline double clipped_mean(const std::vector<double>& v, double k = 3.0) {
  if (v.empty()) return std::nan("");
  double sum = 0;
  const auto kept = within_clip(v, k);
  for (size_t i : kept) sum += v[i];
  return sum / static_cast<double>(kept.size());
}

// The expected maximum of `n` independent standard normal variables (0 for n <= 1): how far, in
// standard deviations, the last of n ranks whose arrival times scatter normally arrives after
// their mean (0.564 for 2, 1.029 for 4, 1.424 for 8, 3.25 for 1,024). Simpson's rule over
// [-12, 12] in 4,800 steps: E = integral of x n phi(x) Phi(x)^(n-1) dx, good to 1e-9 for any n a
// cluster has.
inline double expected_max_of_normals(int64_t n) {
  if (n <= 1) return 0;
  const double lo = -12, hi = 12;
  const int steps = 4800;
  const double h = (hi - lo) / steps, k = static_cast<double>(n);
  auto f = [&](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * k * phi * std::pow(cdf, k - 1);
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < steps; ++i) sum += (i % 2 == 1 ? 4 : 2) * f(lo + h * i);
  return sum * h / 3;
}

}  // namespace orrery::base
