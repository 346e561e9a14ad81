#include "discard_output.hpp"

#include "orrery/base/error.hpp"
#include "sharding_flat.hpp"

namespace orrery::executor {

// What the two autograd functions below share. The output is held as a detached alias (the same
// storage, no autograd history), so the state does not keep the function that made it alive.
struct DiscardState : torch::CustomClassHolder {
  explicit DiscardState(RegionReplay r) : replay(std::move(r)) {}
  RegionReplay replay;
  std::vector<torch::Tensor> inputs;         // what the region ran on
  torch::Tensor output;                      // the first run's output (storage freed, refilled)
  torch::Tensor recomputed;                  // the re-run's output, with its graph
  std::vector<torch::Tensor> replay_inputs;  // the re-run's detached inputs

  // The re-run (phase "rcp"), into the first run's memory; once.
  void rerun() {
    if (recomputed.defined()) return;
    {
      const RecomputingScope rcp;
      recomputed = replay.run(inputs, replay_inputs);
    }
    const torch::NoGradGuard no_grad;
    refill_storage(output).copy_(recomputed.detach());
  }
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

c10::intrusive_ptr<DiscardState> state_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<DiscardState>(ctx->saved_data["state"].toCapsule());
}

// The region's first run (grad mode off inside Function::apply: nothing saved); its backward
// differentiates the re-run.
struct Discarding : torch::autograd::Function<Discarding> {
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<DiscardState>& state) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    state->inputs = inputs.vec();
    auto out = state->replay.region()(state->inputs);
    state->output = out.detach();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto state = state_of(ctx);
    state->rerun();  // normally done already, before the block's backward
    torch::autograd::backward({state->recomputed}, {grads[0]});
    variable_list result;
    for (const auto& in : state->replay_inputs)
      result.push_back(in.requires_grad() ? in.grad() : torch::Tensor());
    result.emplace_back();  // the state
    state->recomputed = torch::Tensor();
    state->replay_inputs.clear();
    state->inputs.clear();
    return result;
  }
};

// Identity on the block's output; its backward re-runs the region before the block's.
struct Refill : torch::autograd::Function<Refill> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const c10::intrusive_ptr<DiscardState>& state) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    state_of(ctx)->rerun();
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

DiscardedOutput::DiscardedOutput() = default;
DiscardedOutput::~DiscardedOutput() = default;

torch::Tensor DiscardedOutput::run(const std::vector<torch::Tensor>& inputs,
                                   RecomputedRegion region) {
  ORRERY_CHECK(!inputs.empty(), "an output-discarding region needs an input");
  state_ = c10::make_intrusive<DiscardState>(
      RegionReplay(std::move(region), inputs.front().device().type()));
  return Discarding::apply(at::TensorList(inputs), state_);
}

torch::Tensor DiscardedOutput::discard_until(const torch::Tensor& block_output) {
  ORRERY_CHECK(state_, "discard_until before run");
  free_storage(state_->output);
  return Refill::apply(block_output, state_);
}

}  // namespace orrery::executor
