// How the microbenchmarks time an op: warm-up calls, one call to size a batch (ops shorter than
// min_batch_s run that many times back to back between two clock reads, so the clock's
// resolution and call jitter do not dominate), then the median of the repetitions.
//
// Compute ops are timed by the calling thread's CPU time, not the wall clock: on a machine shared
// with other work (this project's 2-core VMs run at load averages of 10 and more) a batch's wall
// time is mostly the time slices the scheduler gave other processes, and a median of a few
// batches of milliseconds is then whichever slices landed in them (seen: a 512^3 GEMM at 10% of
// the core's peak, a 16 MB matrix-vector product at 0.3% of its bandwidth). The thread's CPU time
// is what the op cost the core it ran on, which is what a `local` device (one core) is. It is all
// of the op's work because the compute bench runs on one intra-op thread and OpenBLAS (the OpenMP
// build, one thread) computes on the caller's.
#pragma once

#include <time.h>
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

// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID: nanosecond resolution on Linux).
inline double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double seconds = 0;  // median per call, of the thread's CPU time
  double start_s = 0;  // from `origin`
};

template <typename Fn>
Timing time_op(Fn&& fn, const BenchOptions& options, BenchClock::time_point origin) {
  for (int64_t i = 0; i < options.warmup; ++i) fn();
  double t0 = thread_cpu_seconds();
  fn();
  const double once = thread_cpu_seconds() - t0;
  const auto batch = static_cast<int64_t>(
      std::clamp(std::ceil(options.min_batch_s / std::max(once, 1e-9)), 1.0, 1e4));
  Timing out;
  out.start_s = seconds_between(origin, BenchClock::now());
  std::vector<double> per_call;
  for (int64_t r = 0; r < options.repetitions; ++r) {
    t0 = thread_cpu_seconds();
    for (int64_t i = 0; i < batch; ++i) fn();
    per_call.push_back((thread_cpu_seconds() - t0) / static_cast<double>(batch));
  }
  out.seconds = base::median(per_call);
  return out;
}

}  // namespace orrery::executor::detail
