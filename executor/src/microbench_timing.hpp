// How the microbenchmarks time an op: warm-up calls, one call to size a batch (ops shorter than
// min_batch_s run that many times back to back between two clock reads, so the clock's
// resolution and call jitter do not dominate), then the median of the repetitions.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "orrery/base/statistics.hpp"
#include "orrery/executor/microbench.hpp"

namespace orrery::executor::detail {

using BenchClock = std::chrono::steady_clock;

inline double seconds_between(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Timing {
  double seconds = 0;  // median per call
  double start_s = 0;  // from `origin`
};

template <typename Fn>
Timing time_op(Fn&& fn, const BenchOptions& options, BenchClock::time_point origin) {
  for (int64_t i = 0; i < options.warmup; ++i) fn();
  auto t0 = BenchClock::now();
  fn();
  const double once = seconds_between(t0, BenchClock::now());
  const auto batch = static_cast<int64_t>(
      std::clamp(std::ceil(options.min_batch_s / std::max(once, 1e-9)), 1.0, 1e4));
  Timing out;
  out.start_s = seconds_between(origin, BenchClock::now());
  std::vector<double> per_call;
  for (int64_t r = 0; r < options.repetitions; ++r) {
    t0 = BenchClock::now();
    for (int64_t i = 0; i < batch; ++i) fn();
    per_call.push_back(seconds_between(t0, BenchClock::now()) / static_cast<double>(batch));
  }
  out.seconds = base::median(per_call);
  return out;
}

}  // namespace orrery::executor::detail
