#include "loss_scaler.hpp"

#include "orrery/base/error.hpp"

namespace orrery::executor {

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= settings_.backoff_factor;
    clean_steps_ = 0;
    return;
  }
  if (++clean_steps_ < settings_.growth_interval) return;
  scale_ *= settings_.growth_factor;
  clean_steps_ = 0;
}

torch::Tensor LossScaler::state() const {
  return torch::tensor({scale_, static_cast<double>(clean_steps_)}, torch::kFloat64);
}

void LossScaler::load_state(const torch::Tensor& state) {
  ORRERY_CHECK(state.numel() == 2, "a checkpoint's loss scaler state is not {scale, clean steps}");
  const auto values = state.to(torch::kCPU, torch::kFloat64);
  scale_ = values[0].item<double>();
  clean_steps_ = static_cast<int64_t>(values[1].item<double>());
}

bool unscale_and_check(const std::vector<torch::Tensor>& tensors, double scale,
                       const GroupPtr& world) {
  const torch::NoGradGuard no_grad;
  torch::Tensor bad;  // on the gradients' device, read back once below
  for (const auto& t : tensors) {
    auto g = t.grad();
    if (!g.defined()) continue;
    g.mul_(1.0 / scale);
    const auto here = torch::logical_not(torch::isfinite(g).all());
    bad = bad.defined() ? torch::logical_or(bad, here) : here;
  }
  const double local = bad.defined() && bad.item<bool>() ? 1.0 : 0.0;
  // A flag per rank, summed over all of them (Gloo carries CPU tensors whatever the device).
  auto flag = torch::tensor({local}, torch::kFloat64);
  all_reduce_sum(world, flag);
  return flag.item<double>() > 0;
}

}  // namespace orrery::executor
