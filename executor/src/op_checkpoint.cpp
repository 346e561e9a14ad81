#include "op_checkpoint.hpp"

#include <map>
#include <optional>

#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/op_sac.hpp"

namespace orrery::executor {
namespace {

struct OpenScope {
  int64_t layer = -1;
  int64_t matmuls = 0;      // counted so far in this pass over the layer
  int64_t collectives = 0;  // the same for collectives
};

std::optional<OpenScope> g_scope;
std::map<std::string, torch::Tensor> g_kept;  // "L3.mb1.attn.qkv.0" -> kept output

std::string key_of(const std::string& what) {
  ORRERY_CHECK(g_scope.has_value(), "a kept output outside a checkpointed layer: " + what);
  return "L" + std::to_string(g_scope->layer) + ".mb" + std::to_string(current_micro_batch()) +
         "." + what;
}

// Keeps `out` under `key` and returns it.
torch::Tensor keep(const std::string& key, torch::Tensor out) {
  ORRERY_CHECK(g_kept.emplace(key, out).second, "output " + key + " kept twice");
  return out;
}

torch::Tensor take(const std::string& key) {
  const auto it = g_kept.find(key);
  ORRERY_CHECK(it != g_kept.end(), "the re-run needs output " + key + ", which was not kept");
  torch::Tensor out = std::move(it->second);
  g_kept.erase(it);
  return out;
}

// What a kept output's backward needs besides its saved tensors.
struct KeptHolder : torch::CustomClassHolder {
  torch::Tensor kept;
  std::optional<RegionReplay> replay;  // kept_region only
};

c10::intrusive_ptr<KeptHolder> holder_of(torch::autograd::AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<KeptHolder>(ctx->saved_data["kept"].toCapsule());
}

// The kept y of y = x W^T + b; backward as linear's in y's type (under autocast the GEMMs ran in
// bf16 on bf16 copies of x and W, whose casts' backward returns the gradients in their types).
class KeptLinear : public torch::autograd::Function<KeptLinear> {
 public:
  // operands: x, W and, when the matmul has one, b (an undefined tensor has no place in apply).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList operands,
                               const c10::intrusive_ptr<KeptHolder>& holder) {
    ctx->save_for_backward(operands.vec());
    return holder->kept;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor& dy = grads[0];
    const auto type = dy.scalar_type();
    const int64_t out = w.size(0), in = w.size(1);
    const torch::Tensor dy2 = dy.reshape({-1, out});
    torch::autograd::variable_list result{
        dy.matmul(w.to(type)).to(x.scalar_type()),
        dy2.t().mm(x.reshape({-1, in}).to(type)).to(w.scalar_type())};
    if (saved.size() > 2) result.push_back(dy2.sum(0).to(saved[2].scalar_type()));
    result.emplace_back();  // the holder
    return result;
  }
};

// No op timed while alive: the kernel re-run inside a backward belongs to that backward's
// segment (op_trace.hpp), not to a forward node.
class UntracedScope {
 public:
  UntracedScope() : trace_(current_trace()) { set_current_trace(nullptr); }
  ~UntracedScope() { set_current_trace(trace_); }
  UntracedScope(const UntracedScope&) = delete;
  UntracedScope& operator=(const UntracedScope&) = delete;

 private:
  OpTrace* trace_;
};

// The kept output of region(inputs); backward by running region again under autograd.
class KeptRegion : public torch::autograd::Function<KeptRegion> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<KeptHolder>& holder) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["kept"] = c10::IValue::make_capsule(holder);
    return holder->kept;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto holder = holder_of(ctx);
    holder->kept = torch::Tensor();  // the output was handed on; only the region is needed now
    torch::autograd::variable_list result;
    {
      const UntracedScope untraced;
      std::vector<torch::Tensor> inputs;
      const torch::Tensor out = holder->replay->run(ctx->get_saved_variables(), inputs);
      std::vector<torch::Tensor> wanted;
      for (const auto& in : inputs)
        if (in.requires_grad()) wanted.push_back(in);
      const auto got = torch::autograd::grad({out}, wanted, {grads[0]});
      size_t next = 0;
      for (const auto& in : inputs)
        result.push_back(in.requires_grad() ? got[next++] : torch::Tensor());
    }
    result.emplace_back();  // the holder
    return result;
  }
};

}  // namespace

OpCheckpointScope::OpCheckpointScope(int64_t layer) {
  ORRERY_CHECK(!g_scope.has_value(), "checkpointed layers do not nest");
  g_scope = OpenScope{layer, 0, 0};
}

OpCheckpointScope::~OpCheckpointScope() { g_scope.reset(); }

bool op_checkpointing() { return g_scope.has_value(); }

std::vector<bool> next_matmuls_kept(size_t count) {
  ORRERY_CHECK(g_scope.has_value(), "matmuls counted outside a checkpointed layer");
  std::vector<bool> kept;
  for (size_t i = 0; i < count; ++i) kept.push_back(plan::keeps_matmul(g_scope->matmuls++));
  return kept;
}

torch::Tensor kept_linear(const std::string& what, const torch::Tensor& x, const torch::Tensor& w,
                          const torch::Tensor& b) {
  const std::string key = key_of(what);
  if (!recomputing()) return keep(key, torch::linear(x, w, b));
  auto holder = c10::make_intrusive<KeptHolder>();
  holder->kept = take(key);
  return b.defined() ? KeptLinear::apply(at::TensorList({x, w, b}), holder)
                     : KeptLinear::apply(at::TensorList({x, w}), holder);
}

torch::Tensor kept_region(const std::string& what, const std::vector<torch::Tensor>& inputs,
                          RecomputedRegion region) {
  const std::string key = key_of(what);
  if (!recomputing()) return keep(key, region(inputs));
  auto holder = c10::make_intrusive<KeptHolder>();
  holder->kept = take(key);
  holder->replay.emplace(std::move(region), inputs.front().device().type());
  return KeptRegion::apply(at::TensorList(inputs), holder);
}

torch::Tensor kept_collective(const std::function<torch::Tensor()>& run) {
  if (!g_scope.has_value()) return run();
  const std::string key = key_of("collective" + std::to_string(g_scope->collectives++));
  return recomputing() ? take(key) : keep(key, run());
}

size_t kept_outputs_pending() { return g_kept.size(); }

}  // namespace orrery::executor
