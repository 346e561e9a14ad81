#include "dp_tail.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "orrery/base/error.hpp"
#include "orrery/plan/buckets.hpp"

namespace orrery::sim::detail {

double dp_tail(const std::vector<double>& buckets, double window, bool overlap,
               const std::vector<double>& late, double s, double sc,
               const std::vector<double>& shares) {
  const size_t n = buckets.size();
  if (n == 0) return 0;
  auto ready_work = [&](size_t i) {
    if (!overlap) return window;
    return window *
           (shares.empty() ? static_cast<double>(i + 1) / static_cast<double>(n) : shares[i]);
  };
  auto launch_at = [&](size_t i, double ready) { return ready + (i < late.size() ? late[i] : 0); };
  constexpr double kEps = 1e-15;
  double t = 0, work = 0;  // wall clock; compute done (seconds alone)
  size_t next = 0;         // the bucket in flight or next to launch
  double left = 0;         // its communication still to do (seconds alone)
  bool flying = false;
  std::vector<double> ready(n, -1);  // when the compute reached each bucket's share
  while (next < n) {
    for (size_t i = next; i < n && ready_work(i) <= work + kEps * window;
         ++i) {  // those before were launched
      if (ready[i] < 0) ready[i] = t;
    }
    if (!flying && ready[next] >= 0 && launch_at(next, ready[next]) <= t)
      flying = true, left = buckets[next];
    const bool computing = work < window - kEps * window;
    const double compute_rate = flying ? 1 / s : 1, comm_rate = computing ? 1 / sc : 1;
    double dt = std::numeric_limits<double>::infinity();
    if (computing) {
      double target = window;  // the next share some bucket waits for
      for (size_t i = next; i < n; ++i) {
        if (ready[i] < 0) {
          target = ready_work(i);
          break;
        }
      }
      dt = std::min(dt, (target - work) / compute_rate);
    }
    if (flying)
      dt = std::min(dt, left / comm_rate);
    else if (ready[next] >= 0)
      dt = std::min(dt, launch_at(next, ready[next]) - t);
    // A time that is not finite (a latency of 1e308 once made one) turns into NaN here and the
    // walk would never reach its end: fail loudly instead of spinning.
    ORRERY_CHECK(std::isfinite(dt),
                 "dp_tail: a bucket, the window or a launch delay is not finite");
    t += dt;
    if (computing) work = std::min(window, work + dt * compute_rate);
    if (flying) {
      left -= dt * comm_rate;
      if (left <= kEps * std::max(1.0, buckets[next])) flying = false, ++next;
    }
  }
  // Compute left after the last bucket runs alone.
  return std::max(0.0, t + (window - work) - window);
}

std::vector<double> chunk_shares(const std::vector<int64_t>& chunk, int64_t pp, int64_t vp) {
  const double span = 1.0 + static_cast<double>((vp - 1) * pp);
  std::vector<double> out;
  for (size_t i = 0; i < chunk.size();) {
    size_t end = i;
    while (end < chunk.size() && chunk[end] == chunk[i]) ++end;
    const double n = static_cast<double>(end - i);
    for (size_t k = 0; i + k < end; ++k) {
      out.push_back(
          (static_cast<double>((vp - 1 - chunk[i]) * pp) + static_cast<double>(k + 1) / n) / span);
    }
    i = end;
  }
  return out;
}

std::vector<int64_t> bucket_chunks(const std::vector<std::pair<double, double>>& parts,
                                   const std::vector<int64_t>& part_chunk, bool expert,
                                   double bucket_params) {
  std::vector<double> unit_params;
  std::vector<int64_t> unit_chunk;
  for (size_t i = parts.size(); i-- > 0;) {
    unit_params.push_back(expert ? parts[i].second : parts[i].first);
    unit_chunk.push_back(part_chunk[i]);
  }
  std::vector<int64_t> out;
  for (const auto& units : plan::gradient_buckets(unit_params, bucket_params))
    out.push_back(unit_chunk[units.back()]);
  return out;
}

std::vector<double> fill_buckets(const std::vector<std::pair<double, double>>& parts, bool expert,
                                 double bucket_params) {
  std::vector<double> unit_params;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it)
    unit_params.push_back(expert ? it->second : it->first);
  std::vector<double> out;
  for (const auto& units : plan::gradient_buckets(unit_params, bucket_params)) {
    double filled = 0;
    for (size_t u : units) filled += unit_params[u];
    out.push_back(filled);
  }
  return out;
}

}  // namespace orrery::sim::detail
