// Small order statistics shared by the executor (measured traces, microbenchmarks) and the
// simulator's fits. Wall-clock timings on shared machines have heavy upper tails (a descheduled
// thread, a page fault), so orrery summarises repeated measurements by their median, not their
// mean.
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

}  // namespace orrery
