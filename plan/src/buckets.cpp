#include "orrery/plan/buckets.hpp"

#include <algorithm>
#include <utility>

namespace orrery::plan {

double gradient_bucket_params(const pb::Plan& plan, int64_t dp, double grad_bytes) {
  return plan.bucket_bytes() > 0 ? plan.bucket_bytes() / grad_bytes
                                 : std::max(40e6, 1e6 * static_cast<double>(dp));
}

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<double>& unit_params,
                                                  double bucket_params) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> open;
  double filled = 0;
  for (size_t i = 0; i < unit_params.size(); ++i) {
    if (unit_params[i] <= 0) continue;
    open.push_back(i);
    filled += unit_params[i];
    if (filled >= bucket_params) {
      out.push_back(std::move(open));
      open.clear();
      filled = 0;
    }
  }
  if (!open.empty()) out.push_back(std::move(open));
  return out;
}

}  // namespace orrery::plan
