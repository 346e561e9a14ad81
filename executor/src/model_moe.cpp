#include "model_moe.hpp"

#include <numeric>
#include <optional>

#include "discard_output.hpp"
#include "mixed_precision.hpp"
#include "moe_capacity.hpp"
#include "op_checkpoint.hpp"
#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/models/activation.hpp"
#include "recompute.hpp"

namespace orrery::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Records on the trace that collective `name` carried bf16.
void mark_bf16(const std::string& name, bool bf16) {
  if (OpTrace* t = current_trace(); t != nullptr && bf16) t->set_dtype(name, "bf16");
}

std::vector<int64_t> as_vector(const torch::Tensor& t) {
  const auto c =
      t.to(torch::kCPU, torch::kInt64).contiguous();  // read on the host, wherever t lives
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Rows [sum send[0..i), + send[i]) of `x` go to group rank i; `recv[i]` rows come from rank i.
// `bf16`: they travel as bf16 (carried by Gloo as fp16 bytes, mixed_precision.hpp) and arrive in
// x's type.
torch::Tensor exchange_rows(const torch::Tensor& x, Group* group, std::vector<int64_t> send,
                            std::vector<int64_t> recv, bool bf16) {
  torch::Tensor in = (bf16 ? x.to(at::kBFloat16) : x).contiguous();
  const int64_t rows = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  torch::Tensor out = torch::empty({rows, x.size(1)}, in.options());
  auto out_view = gloo_view(out), in_view = gloo_view(in);
  group->alltoall_base(out_view, in_view, recv, send)->wait();
  return out.to(x.scalar_type());
}

// The EP all-to-all as an autograd function: backward sends the gradients back the way the rows
// came (split sizes swapped). Under bf16 autocast both directions carry bf16 (the lowering's
// activation_bytes 2); dispatch sends the normalized fp32 hidden states, which the experts' GEMMs
// round to bf16 anyway, and combine sends the experts' bf16 outputs: the values are those of one
// process.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group,
                               std::vector<int64_t> send, std::vector<int64_t> recv,
                               const std::string& name, const std::string& grad_name) {
    const bool bf16 = activation_wire_type(x) == at::kBFloat16;
    ctx->saved_data["group"] = group;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["grad_name"] = grad_name;
    ctx->saved_data["bf16"] = bf16;
    return kept_collective([&] {  // op_checkpoint.hpp
      OpTrace::Scope scope(current_trace(), name);
      mark_bf16(name, bf16);
      return exchange_rows(x, from_handle(group), send, recv, bf16);
    });
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const std::string& name = ctx->saved_data["grad_name"].toStringRef();
    const bool bf16 = ctx->saved_data["bf16"].toBool();
    OpTrace::Scope scope(current_trace(), name);
    mark_bf16(name, bf16);
    auto out = exchange_rows(grad[0], from_handle(ctx->saved_data["group"].toInt()),
                             ctx->saved_data["recv"].toIntVector(),
                             ctx->saved_data["send"].toIntVector(), bf16);
    return {
        out, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// up (+ gate, one GEMM), activation, down of one expert (or of the shared experts) under the
// lowering's op names `<op>.up<piece>`, `<op>.act<piece>`, `<op>.down<piece>`: with an empty
// `piece` the times of all experts of a layer add up under one name (grouped GEMMs); under
// moe_expert_gemm per_expert each local expert has its own (".expert<j>"). `prefix` names the
// parameters ("layers.1.moe.experts.2.").
torch::Tensor expert_ffn(const MoeContext& c, int64_t layer, const std::string& op,
                         const std::string& prefix, const torch::Tensor& x,
                         const std::string& piece = "") {
  auto need = [&](const std::string& name) -> const torch::Tensor& {
    const torch::Tensor* t = c.param(prefix + name);
    ORRERY_CHECK(t != nullptr, "no parameter " + prefix + name);
    return *t;
  };
  auto maybe = [&](const std::string& name) {
    const torch::Tensor* t = c.param(prefix + name);
    return t != nullptr ? *t : torch::Tensor();
  };
  const auto activation = c.spec->activation();
  const bool gate = models::gated_activation(activation);
  auto up = timed_op(layer, op + ".up" + piece, [&] {
    const torch::Tensor bias = maybe("up.bias");
    if (!gate) return torch::linear(x, need("up.weight"), bias);
    // [..., 2 w], gate first; the bias belongs to the up half.
    auto w = torch::cat({need("up.gate_weight"), need("up.weight")});
    return torch::linear(x, w, bias.defined() ? torch::cat({torch::zeros_like(bias), bias}) : bias);
  });
  const std::string act_op = op + ".act" + piece;
  auto act_of = [layer, act_op, gate, activation](const std::vector<torch::Tensor>& in) {
    return timed_op(layer, act_op, [&] { return ffn_activation(in[0], activation, gate); });
  };
  // recompute_modules moe_act: the routed experts' activation output is discarded once the down
  // projection has read it and re-made before that projection's backward (discard_output.hpp).
  std::optional<DiscardedOutput> discarded;
  const bool discard = op == "moe.experts" && recomputes_module(pb::RECOMPUTE_MODULE_MOE_ACT);
  auto act = discard ? discarded.emplace().run({up}, act_of) : act_of({up});
  auto down = timed_op(layer, op + ".down" + piece, [&] {
    torch::Tensor bias = maybe("down.bias");
    // The TP ranks' partial outputs are summed: each adds bias / tp (exact for powers of two).
    if (bias.defined() && c.tp_size > 1) bias = bias / static_cast<double>(c.tp_size);
    return torch::linear(act, need("down.weight"), bias);
  });
  return discarded ? discarded->discard_until(down) : down;
}

// The inverse of permutation `p`.
torch::Tensor inverse_permutation(const torch::Tensor& p) {
  return torch::empty_like(p).scatter_(0, p, torch::arange(p.numel(), p.options()));
}

}  // namespace

std::vector<MoeParam> moe_parameters(const pb::ModelSpec& spec, int64_t layer, double init_std,
                                     double out_std) {
  const auto& moe = spec.moe();
  const int64_t h = spec.hidden_size();
  const bool bias = spec.linear_bias(), gate = models::gated_activation(spec.activation());
  const std::string m = "layers." + std::to_string(layer) + ".moe.";
  std::vector<MoeParam> out;
  out.push_back({m + "router.weight", {moe.num_experts(), h}, -1, init_std, -1, true});
  auto ffn = [&](const std::string& prefix, int64_t width, int64_t expert) {
    if (gate) out.push_back({prefix + "up.gate_weight", {width, h}, 0, init_std, expert, false});
    out.push_back({prefix + "up.weight", {width, h}, 0, init_std, expert, false});
    if (bias) out.push_back({prefix + "up.bias", {width}, 0, 0, expert, false});
    out.push_back({prefix + "down.weight", {h, width}, 1, out_std, expert, false});
    if (bias) out.push_back({prefix + "down.bias", {h}, -1, 0, expert, true});
  };
  if (moe.num_shared_experts() > 0) {
    const int64_t width = moe.shared_expert_ffn_hidden_size() > 0
                              ? moe.shared_expert_ffn_hidden_size()
                              : moe.expert_ffn_hidden_size();
    ffn(m + "shared.", moe.num_shared_experts() * width, -1);
  }
  for (int64_t e = 0; e < moe.num_experts(); ++e) {
    ffn(m + "experts." + std::to_string(e) + ".", moe.expert_ffn_hidden_size(), e);
  }
  return out;
}

int64_t expert_owner(const pb::ModelSpec& spec, int64_t ep_size, int64_t expert) {
  return expert / (spec.moe().num_experts() / ep_size);
}

torch::Tensor ffn_activation(const torch::Tensor& up, pb::Activation activation, bool gated) {
  if (gated) {
    auto halves = up.chunk(2, -1);
    return activation == pb::ACTIVATION_SWIGLU ? torch::silu(halves[0]) * halves[1]
                                               : torch::gelu(halves[0]) * halves[1];
  }
  switch (activation) {
    case pb::ACTIVATION_RELU:
      return torch::relu(up);
    case pb::ACTIVATION_SQUARED_RELU:
      return torch::relu(up).pow(2);
    default:
      return torch::gelu(up);
  }
}

torch::Tensor moe_ffn(const MoeContext& c, int64_t layer, const torch::Tensor& input) {
  const auto& moe = c.spec->moe();
  const int64_t experts = moe.num_experts(), k = moe.top_k(), h = input.size(-1);
  const int64_t ep = c.ep.group ? c.ep.size : 1, local = experts / ep, first = c.ep.rank * local;
  const std::string pre = "layers." + std::to_string(layer) + ".moe.";
  const torch::Tensor x = input.reshape({-1, h});
  const int64_t tokens = x.size(0);
  const int64_t mb = current_micro_batch();

  // Router: top-k of the softmax, renormalized (Mixtral). `expert` [tokens * k]: the expert of
  // each routed copy, token-major.
  torch::Tensor expert;
  auto weights = timed_op(layer, "moe.router", [&] {
    const torch::Tensor* w = c.param(pre + "router.weight");
    ORRERY_CHECK(w != nullptr, "no parameter " + pre + "router.weight");
    auto probs = torch::softmax(torch::linear(x, *w), -1);
    auto [top, index] = probs.topk(k, -1);
    expert = index.reshape({-1});
    return top / top.sum(-1, true);
  });
  // The copies the experts take (all of them without a capacity), grouped by expert with token
  // order within an expert; padded to the capacity, each expert's rows end in zeros.
  const RoutedCopies copies = route_copies(expert, weights.reshape({-1}), experts, k, input.size(1),
                                           c.token_groups, c.capacity);
  const torch::Tensor& order = copies.order;
  const torch::Tensor& per_expert = copies.rows;  // [experts]
  torch::Tensor routed = x.index_select(0, torch::div(order, k, "floor"));
  if (copies.slot.defined()) {
    routed =
        torch::zeros({copies.padded_rows, h}, routed.options()).index_copy(0, copies.slot, routed);
  }

  // Dispatch: the copies for expert e go to the EP rank holding it. First the counts per
  // (source rank, local expert), then the rows.
  torch::Tensor counts = per_expert.view({1, experts});  // rows here: [source rank, local expert]
  std::vector<int64_t> send, recv;
  if (ep > 1) {
    const std::string name = site_name(layer, mb, "fwd", "moe.router.all_to_all");
    torch::Tensor in = per_expert.contiguous();
    const torch::Tensor out = kept_collective([&] {
      OpTrace::Scope scope(current_trace(), name);
      torch::Tensor received = torch::empty_like(in);
      std::vector<int64_t> equal;
      c.ep.group->alltoall_base(received, in, equal, equal)->wait();
      return received;
    });
    counts = out.view({ep, local});
    send = as_vector(in.view({ep, local}).sum(1));
    recv = as_vector(counts.sum(1));
    routed = AllToAll::apply(routed, as_handle(c.ep.group), send, recv, name,
                             site_name(layer, mb, "bwd", "moe.router.grad.all_to_all"));
  }

  // The shared experts, checkpointed alone under recompute_modules shared_experts (Megatron's
  // SharedExpertMLP checkpoint: the input kept, re-run when the backward reaches their output);
  // under moe the whole layer already re-runs.
  torch::Tensor shared;
  if (moe.num_shared_experts() > 0 && recomputes_module(pb::RECOMPUTE_MODULE_SHARED_EXPERTS) &&
      !recomputes_module(pb::RECOMPUTE_MODULE_MOE)) {
    shared = recompute_in_backward({x}, [c, layer, pre](const std::vector<torch::Tensor>& in) {
      return expert_ffn(c, layer, "moe.shared", pre + "shared.", in[0]);
    });
  } else if (moe.num_shared_experts() > 0) {
    shared = expert_ffn(c, layer, "moe.shared", pre + "shared.", x);
  }

  // The rows here come by source rank, then local expert: group them by expert, run each expert
  // on its rows, and put the results back in arrival order.
  torch::Tensor by_expert;
  if (ep > 1) {
    const auto local_ids = torch::arange(local, counts.options()).repeat({ep});
    const auto row_expert = torch::repeat_interleave(local_ids, counts.reshape({-1}));
    by_expert = std::get<1>(torch::sort(row_expert, true, 0, false));
    routed = routed.index_select(0, by_expert);
  }
  const auto rows = as_vector(counts.sum(0));
  const auto pieces = routed.split_with_sizes(rows);
  std::vector<torch::Tensor> outs;
  for (int64_t j = 0; j < local; ++j) {
    outs.push_back(expert_ffn(
        c, layer, "moe.experts", pre + "experts." + std::to_string(first + j) + ".",
        pieces[static_cast<size_t>(j)], c.per_expert_nodes ? ".expert" + std::to_string(j) : ""));
  }
  torch::Tensor out = torch::cat(outs);
  if (ep > 1) {
    out = out.index_select(0, inverse_permutation(by_expert));
    // Combine: every copy back to the rank of its token.
    out = AllToAll::apply(out, as_handle(c.ep.group), recv, send,
                          site_name(layer, mb, "fwd", "moe.experts.down.all_to_all"),
                          site_name(layer, mb, "bwd", "moe.experts.down.grad.all_to_all"));
  }
  // Back to token-major order (a dropped copy's output is zero), weighted by the router and
  // summed over each token's k copies.
  if (copies.slot.defined()) out = out.index_select(0, copies.slot);
  out = torch::zeros({tokens * k, h}, out.options()).index_copy(0, order, out).view({tokens, k, h});
  auto y = (out * weights.unsqueeze(-1)).sum(1);
  if (shared.defined()) y = y + shared;
  return y.view(input.sizes());
}

torch::Tensor share_expert_tensor(const torch::Tensor& held, const std::vector<int64_t>& full_shape,
                                  const GroupPtr& ep, const torch::TensorOptions& options) {
  if (!ep) return held;
  torch::Tensor t = held.defined() ? held.contiguous().clone() : torch::zeros(full_shape, options);
  all_reduce_sum(ep, t);
  return t;
}

}  // namespace orrery::executor
