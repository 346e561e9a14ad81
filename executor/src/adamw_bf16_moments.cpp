#include "adamw_bf16_moments.hpp"

#include <cmath>

namespace orrery::executor {

torch::Tensor AdamWBf16Moments::step(LossClosure closure) {
  const torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    const at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const auto [beta1, beta2] = options.betas();
    TORCH_CHECK(!options.amsgrad(), "bf16 moments: amsgrad is not supported");
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      // The key torch::optim::AdamW files a parameter's state under, so save() and load() of
      // the base class read and write these moments.
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
      if (options.weight_decay() != 0) p.mul_(1 - options.lr() * options.weight_decay());
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, p.options().dtype(torch::kBFloat16)));
        fresh->exp_avg_sq(torch::zeros_like(p, p.options().dtype(torch::kBFloat16)));
        found = state_.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      state.step(state.step() + 1);
      const double bias_correction1 = 1 - std::pow(beta1, state.step());
      const double bias_correction2 = 1 - std::pow(beta2, state.step());
      torch::Tensor m = state.exp_avg().to(torch::kFloat32).mul_(beta1).add_(grad, 1 - beta1);
      torch::Tensor v =
          state.exp_avg_sq().to(torch::kFloat32).mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const torch::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(options.eps());
      p.addcdiv_(m, denom, -options.lr() / bias_correction1);
      state.exp_avg().copy_(m);
      state.exp_avg_sq().copy_(v);
    }
  }
  return loss;
}

}  // namespace orrery::executor
