#include "grad_ready.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "orrery/base/error.hpp"

namespace orrery::executor {
namespace {

// Runs after the accumulator has added this pass's gradient into .grad.
struct ReadyHook final : torch::autograd::FunctionPostHook {
  ReadyHook(BucketReadiness* owner, size_t param) : owner_(owner), param_(param) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    owner_->ready(param_);
    return outputs;
  }
  BucketReadiness* owner_;
  size_t param_;
};

}  // namespace

BucketReadiness::BucketReadiness(const std::vector<std::vector<torch::Tensor>>& buckets,
                                 std::vector<bool> deferred, std::function<bool()> final_pass,
                                 std::function<void(size_t)> launch)
    : deferred_(std::move(deferred)),
      final_pass_(std::move(final_pass)),
      launch_(std::move(launch)) {
  ORRERY_CHECK(deferred_.size() == buckets.size(), "BucketReadiness: one deferred flag per bucket");
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_.push_back(static_cast<int64_t>(buckets[b].size()));
    for (const auto& t : buckets[b]) {
      ORRERY_CHECK(t.is_leaf() && t.requires_grad(),
                   "BucketReadiness: bucket members must be trainable leaves");
      Hooked h;
      h.accumulator = torch::autograd::impl::grad_accumulator(t);
      h.bucket = b;
      h.key = h.accumulator->add_post_hook(std::make_unique<ReadyHook>(this, hooked_.size()));
      hooked_.push_back(std::move(h));
    }
  }
  reset();
}

BucketReadiness::~BucketReadiness() {
  for (auto& h : hooked_) h.accumulator->del_post_hook(h.key);
}

void BucketReadiness::reset() {
  seen_.assign(hooked_.size(), false);
  pending_ = size_;
  next_ = 0;
}

void BucketReadiness::ready(size_t param) {
  if (!final_pass_() || seen_[param]) return;
  seen_[param] = true;
  --pending_[hooked_[param].bucket];
  launch_ready();
}

void BucketReadiness::launch_ready() {
  while (next_ < pending_.size() && pending_[next_] == 0 && !deferred_[next_]) launch_(next_++);
}

void BucketReadiness::launch_rest() {
  while (next_ < pending_.size()) launch_(next_++);
}

}  // namespace orrery::executor
