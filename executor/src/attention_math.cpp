#include "attention_math.hpp"

#include <cmath>

namespace orrery::executor {

torch::Tensor attention_mask(int64_t s, int64_t window, const torch::TensorOptions& options) {
  auto future = torch::ones({s, s}, options.dtype(torch::kBool)).triu(1);
  if (window <= 0 || window >= s) return future;
  // tril(-window): keys at least `window` positions before the query.
  auto too_far = torch::ones({s, s}, options.dtype(torch::kBool)).tril(-window);
  return future.logical_or(too_far);
}

std::vector<double> alibi_slopes(int64_t heads) {
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<double> slopes;
  for (int64_t i = 1; i <= n; ++i)
    slopes.push_back(std::pow(2.0, -8.0 * static_cast<double>(i) / static_cast<double>(n)));
  for (int64_t i = 1; i <= heads - n; ++i)
    slopes.push_back(std::pow(2.0, -4.0 * static_cast<double>(2 * i - 1) / static_cast<double>(n)));
  return slopes;
}

torch::Tensor alibi_bias(int64_t heads, int64_t first, int64_t count, int64_t s,
                         const torch::TensorOptions& options) {
  const std::vector<double> all = alibi_slopes(heads);
  const std::vector<double> mine(all.begin() + first, all.begin() + first + count);
  auto slopes = torch::tensor(mine, torch::kFloat64).view({count, 1, 1});
  auto position = torch::arange(s, torch::kFloat64);
  auto distance = position.view({1, s}) - position.view({s, 1});  // j - i
  return (slopes * distance.unsqueeze(0)).to(options);
}

torch::Tensor softcap(const torch::Tensor& x, double cap) { return torch::tanh(x / cap) * cap; }

}  // namespace orrery::executor
