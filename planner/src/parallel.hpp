// A minimal fork-join pool: f(i) for i in [0, n) on `threads` std::threads pulling indices from
// one counter. Callers write results by index, so the outcome does not depend on the schedule.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace orrery::planner::detail {

template <class F>
void parallel_for(size_t n, int threads, F&& f) {
  const size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        f(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = n;
      }
    }
  };
  if (workers <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t + 1 < workers; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace orrery::planner::detail
