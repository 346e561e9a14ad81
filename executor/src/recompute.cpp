#include "recompute.hpp"

#include <optional>

#include "mixed_precision.hpp"
#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/recomputed_layers.hpp"

namespace orrery::executor {
namespace {

pb::Plan g_plan;  // only its recompute fields are set
bool g_recomputing = false;

// What the backward pass needs besides the saved inputs, kept in the autograd context.
struct RegionHolder : torch::CustomClassHolder {
  explicit RegionHolder(RegionReplay r) : replay(std::move(r)) {}
  RegionReplay replay;
};

class Recompute : public torch::autograd::Function<Recompute> {
 public:
  // Runs with grad mode off (Function::apply), so the region saves nothing.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<RegionHolder>& holder) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["region"] = c10::IValue::make_capsule(holder);
    return holder->replay.region()(inputs.vec());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder =
        c10::static_intrusive_pointer_cast<RegionHolder>(ctx->saved_data["region"].toCapsule());
    std::vector<torch::Tensor> inputs;
    torch::Tensor out;
    {
      const RecomputingScope rcp;
      out = holder->replay.run(ctx->get_saved_variables(), inputs);
    }
    torch::autograd::backward({out}, {grads[0]});
    torch::autograd::variable_list result;
    for (const auto& in : inputs)
      result.push_back(in.requires_grad() ? in.grad() : torch::Tensor());
    result.emplace_back();  // the holder
    return result;
  }
};

}  // namespace

pb::Recompute recompute_mode() { return g_plan.recompute(); }
void set_recompute_mode(const pb::Plan& plan) {
  g_plan.Clear();
  g_plan.set_recompute(plan.recompute());
  if (plan.has_recompute_every()) g_plan.set_recompute_every(plan.recompute_every());
  *g_plan.mutable_recompute_modules() = plan.recompute_modules();
}
bool recomputes_layer(int64_t layer) { return plan::recomputes_layer(g_plan, layer); }
bool recomputes_module(pb::RecomputeModule module) {
  return plan::recomputes_module(g_plan, module);
}
bool recomputing() { return g_recomputing; }

RegionReplay::RegionReplay(RecomputedRegion region, c10::DeviceType device)
    : region_(std::move(region)), device_(device), autocast_(autocast_type(device)) {}

torch::Tensor RegionReplay::run(const std::vector<torch::Tensor>& saved,
                                std::vector<torch::Tensor>& inputs) const {
  inputs.clear();
  for (const auto& t : saved) inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
  const torch::AutoGradMode grad_mode(true);
  const AutocastScope autocast(autocast_.has_value(), device_, autocast_.value_or(at::kBFloat16));
  return region_(inputs);
}
void set_recomputing(bool on) { g_recomputing = on; }

torch::Tensor recompute_in_backward(const std::vector<torch::Tensor>& inputs,
                                    RecomputedRegion region) {
  ORRERY_CHECK(!inputs.empty(), "a recomputed region needs an input");
  bool any = false;
  for (const auto& in : inputs) any = any || in.requires_grad();
  ORRERY_CHECK(any,
               "a recomputed region needs an input that requires grad (else its parameters "
               "would get no gradient)");
  auto holder = c10::make_intrusive<RegionHolder>(
      RegionReplay(std::move(region), inputs.front().device().type()));
  return Recompute::apply(at::TensorList(inputs), holder);
}

}  // namespace orrery::executor
