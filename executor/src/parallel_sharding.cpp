#include "parallel_sharding.hpp"

#include "adamw_bf16_moments.hpp"
#include "loss_scaler.hpp"
#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "sharding_strategy.hpp"

namespace orrery::executor {

namespace {

std::unique_ptr<ShardingStrategy> make_strategy(Transformer& model, const RankGroups& groups,
                                                const TrainConfig& c, int64_t ep_size) {
  const auto sharding = c.plan.sharding();
  // Without a DP group there is nothing to shard: the lowering has no data-parallel collectives.
  if (!groups.dp) return make_replicated_strategy(model, groups, c, ep_size);
  if (plan::shards_parameters(sharding)) {
    return make_fsdp_strategy(model, groups, c);
  }
  if (sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2) {
    return make_zero_strategy(model, groups, c, ep_size);
  }
  return make_replicated_strategy(model, groups, c, ep_size);
}

}  // namespace

DataParallelOptimizer::DataParallelOptimizer(Transformer& model, const RankGroups& groups,
                                             const TrainConfig& c, int64_t ep_size)
    : model_(model),
      opt_{c.learning_rate, c.beta1, c.beta2, c.adam_eps, c.weight_decay, c.clip_grad_norm},
      world_(groups.world),
      strategy_(make_strategy(model, groups, c, ep_size)),
      parameters_are_chunks_(groups.dp && plan::shards_parameters(c.plan.sharding())) {
  if (strategy_->uses_part_hooks()) model_.set_part_hooks(this);
  const auto options = torch::optim::AdamWOptions(opt_.learning_rate)
                           .betas({opt_.beta1, opt_.beta2})
                           .eps(opt_.eps)
                           .weight_decay(opt_.weight_decay);
  if (c.plan.optimizer_state_dtype() == pb::OPTIMIZER_STATE_DTYPE_BF16) {
    adamw_ = std::make_unique<AdamWBf16Moments>(strategy_->optimized(), options);
  } else {
    adamw_ = std::make_unique<torch::optim::AdamW>(strategy_->optimized(), options);
  }
}

DataParallelOptimizer::~DataParallelOptimizer() {
  if (strategy_->uses_part_hooks()) model_.set_part_hooks(nullptr);
}

void DataParallelOptimizer::zero_grad() { strategy_->zero_grad(); }

std::optional<double> DataParallelOptimizer::step(std::optional<double> loss_scale) {
  strategy_->reduce_gradients();
  std::optional<double> norm;
  {
    // Unscaling and the inf/nan check (fp16), clipping, the norm's all-reduces and AdamW are
    // timed together as the optimizer node: the lowering has no node of its own for the check.
    OpTrace::Scope scope(current_trace(), "opt.adamw");
    if (!loss_scale || !unscale_and_check(strategy_->optimized(), *loss_scale, world_)) {
      norm = strategy_->clip(opt_.clip_grad_norm);
      adamw_->step();
    }
  }
  // A skipped step still gathers the (unchanged) parameters, so every rank runs the same
  // collectives whatever the flag said.
  strategy_->after_update();
  return norm;
}

void DataParallelOptimizer::gather_parameters() { strategy_->gather_parameters(); }

void DataParallelOptimizer::save(torch::serialize::OutputArchive& archive) const {
  const auto& params = model_.parameters();
  for (size_t i = 0; i < params.size() && !parameters_are_chunks_; ++i) {
    archive.write("param_" + std::to_string(i), params[i].tensor.detach());
  }
  const auto tensors = strategy_->optimized();
  for (size_t i = 0; i < tensors.size(); ++i) {
    archive.write("optimized_" + std::to_string(i), tensors[i].detach());
  }
  torch::serialize::OutputArchive adamw;
  adamw_->save(adamw);
  archive.write("adamw", adamw);
}

void DataParallelOptimizer::load(torch::serialize::InputArchive& archive) {
  const torch::NoGradGuard no_grad;
  auto& params = model_.mutable_parameters();
  for (size_t i = 0; i < params.size() && !parameters_are_chunks_; ++i) {
    torch::Tensor saved;
    archive.read("param_" + std::to_string(i), saved);
    ORRERY_CHECK(saved.sizes() == params[i].tensor.sizes(),
                 "a checkpoint's parameter differs in shape under the same plan");
    params[i].tensor.detach().copy_(saved);
  }
  const auto tensors = strategy_->optimized();
  for (size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor saved;
    archive.read("optimized_" + std::to_string(i), saved);
    ORRERY_CHECK(saved.sizes() == tensors[i].sizes(),
                 "a checkpoint's optimized tensor differs in shape under the same plan");
    tensors[i].detach().copy_(saved);
  }
  torch::serialize::InputArchive adamw;
  archive.read("adamw", adamw);
  adamw_->load(adamw);
}

void DataParallelOptimizer::before_forward(const std::string& part) {
  strategy_->before_forward(part);
}

torch::Tensor DataParallelOptimizer::after_forward(const std::string& part,
                                                   const torch::Tensor& output) {
  return strategy_->after_forward(part, output);
}

}  // namespace orrery::executor
