#include <cmath>

#include "mixed_precision.hpp"
#include "op_checkpoint.hpp"
#include "op_trace.hpp"
#include "parallel.hpp"

namespace orrery::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// How a TP/SP collective carries its tensor: fp32 runs move and reduce the tensor as it is; under
// bf16 autocast it travels as bf16 (the lowering's activation_bytes 2), reductions run as an
// all-to-all of bf16 pieces plus a local fp32 sum (Gloo 1.13 reduces no bf16; mixed_precision.hpp),
// and the result comes back in the input's type, so the residual stream and the norms stay fp32.
// Decided in forward (under autocast) and kept for backward (which runs outside it).
bool bf16_wire(const torch::Tensor& x) { return activation_wire_type(x) == at::kBFloat16; }

// Notes on the trace how collective `name` ran: its algorithm when it differs from the lowering's
// collective (Gloo has no reduce-scatter), and "bf16" when it carried bf16.
void describe(const std::string& name, bool bf16, const char* algorithm) {
  OpTrace* t = current_trace();
  if (t == nullptr || name.empty()) return;
  if (algorithm != nullptr) t->set_algorithm(name, algorithm);
  if (bf16) t->set_dtype(name, "bf16");
}

// The two reductions' algorithms on Gloo, as the trace records them.
constexpr const char* kReduceScatterAlgorithm = "alltoall+sum";
constexpr const char* kBf16AllReduceAlgorithm = "alltoall+sum+allgather";

// Row j of `rows` ([n, ...], n the group size) is sent to rank j; returns the n rows received.
torch::Tensor exchange_rows(const torch::Tensor& rows, Group* group) {
  auto output = torch::empty_like(rows);
  auto out = gloo_view(output), in = gloo_view(rows);
  std::vector<int64_t> equal_splits;  // empty: n equal parts
  group->alltoall_base(out, in, equal_splits, equal_splits)->wait();
  return output;
}

// The bf16 reduce-scatter of `rows` ([n, ...] as exchange_rows takes it): each rank receives the
// n ranks' bf16 copies of its row, sums them in fp32 and rounds the sum to bf16 once (what NCCL's
// bf16 ring does up to its summation order).
torch::Tensor reduce_rows_bf16(const torch::Tensor& rows, Group* group) {
  return exchange_rows(rows.to(at::kBFloat16).contiguous(), group)
      .to(at::kFloat)
      .sum(0)
      .to(at::kBFloat16);
}

// The n ranks' `local` tensors concatenated along `dim` (bf16 carried as fp16 bytes).
torch::Tensor gathered(const torch::Tensor& local, int64_t dim, Group* group) {
  const torch::Tensor in = local.contiguous();
  std::vector<std::vector<torch::Tensor>> out(1);
  std::vector<torch::Tensor> full;
  for (int i = 0; i < group->getSize(); ++i) {
    full.push_back(torch::empty_like(in));
    out[0].push_back(gloo_view(full.back()));
  }
  std::vector<torch::Tensor> views{gloo_view(in)};
  group->allgather(out, views)->wait();
  return torch::cat(full, dim);
}

torch::Tensor summed(const torch::Tensor& x, Group* group, bool bf16) {
  if (!bf16) {
    std::vector<torch::Tensor> t{x.contiguous().clone()};
    group->allreduce(t)->wait();
    return t[0];
  }
  // A ring all-reduce's two halves: reduce-scatter the flat tensor (padded to n equal pieces),
  // then all-gather the reduced bf16 pieces; 2 (n - 1) / n of the tensor's bf16 bytes each way.
  const int64_t n = group->getSize(), numel = x.numel(), piece = (numel + n - 1) / n;
  auto flat = x.to(at::kBFloat16).reshape({-1});
  if (piece * n > numel)
    flat = torch::cat({flat, torch::zeros({piece * n - numel}, flat.options())});
  const auto mine = reduce_rows_bf16(flat.view({n, piece}), group);
  return gathered(mine, 0, group).narrow(0, 0, numel).view(x.sizes()).to(x.scalar_type());
}

torch::Tensor seq_slice(const torch::Tensor& x, Group* group) {
  const int64_t part = x.size(1) / group->getSize();
  return x.narrow(1, group->getRank() * part, part).contiguous();
}

// Reduce-scatter along the sequence dimension (Megatron SP's "reduce-scatter to the sequence
// region"). Gloo 1.13 has no reduce-scatter, and an all-reduce followed by a slice would move
// twice the bytes of one, which is not what the plan (or the simulator) says runs: each rank
// sends every other rank that rank's chunk (alltoall_base) and sums what it receives, as the
// ZeRO path does.
torch::Tensor seq_reduce_scatter(const torch::Tensor& x, Group* group, bool bf16) {
  const int64_t n = group->getSize();
  // Row j of `input` is the chunk rank j keeps: alltoall's equal splits of dim 0 send it there.
  auto input = torch::stack(x.chunk(n, 1), 0).contiguous();
  if (bf16) return reduce_rows_bf16(input, group).to(x.scalar_type());
  return exchange_rows(input, group).sum(0);
}

torch::Tensor seq_gather(const torch::Tensor& x, Group* group, bool bf16) {
  if (bf16) return gathered(x.to(at::kBFloat16), 1, group).to(x.scalar_type());
  return gathered(x, 1, group);
}

// Each function carries the trace names of its forward and backward collectives (empty: not
// timed) through the autograd context.
std::string name_of(AutogradContext* ctx, const char* key) {
  return ctx->saved_data[key].toStringRef();
}

struct GatherFromSeq : torch::autograd::Function<GatherFromSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group,
                               bool reduce_grad, const std::string& name,
                               const std::string& grad_name) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["reduce"] = reduce_grad;
    ctx->saved_data["grad_name"] = grad_name;
    const bool bf16 = bf16_wire(x);
    ctx->saved_data["bf16"] = bf16;
    return kept_collective([&] {  // op_checkpoint.hpp
      OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name);
      describe(name, bf16, nullptr);
      return seq_gather(x, from_handle(group), bf16);
    });
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* g = from_handle(ctx->saved_data["group"].toInt());
    const bool reduce = ctx->saved_data["reduce"].toBool(), bf16 = ctx->saved_data["bf16"].toBool();
    const std::string name = name_of(ctx, "grad_name");
    OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name);
    if (reduce) describe(name, bf16, kReduceScatterAlgorithm);
    return {reduce ? seq_reduce_scatter(grad[0], g, bf16) : seq_slice(grad[0], g), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ReduceScatterToSeq : torch::autograd::Function<ReduceScatterToSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group,
                               const std::string& name, const std::string& grad_name) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["grad_name"] = grad_name;
    const bool bf16 = bf16_wire(x);
    ctx->saved_data["bf16"] = bf16;
    return kept_collective([&] {
      OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name);
      describe(name, bf16, kReduceScatterAlgorithm);
      return seq_reduce_scatter(x, from_handle(group), bf16);
    });
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const std::string name = name_of(ctx, "grad_name");
    const bool bf16 = ctx->saved_data["bf16"].toBool();
    OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name);
    describe(name, bf16, nullptr);
    return {seq_gather(grad[0], from_handle(ctx->saved_data["group"].toInt()), bf16),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group,
                               const std::string& grad_name) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["grad_name"] = grad_name;
    ctx->saved_data["bf16"] = bf16_wire(x);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const std::string name = name_of(ctx, "grad_name");
    const bool bf16 = ctx->saved_data["bf16"].toBool();
    OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name);
    describe(name, bf16, bf16 ? kBf16AllReduceAlgorithm : nullptr);
    return {summed(grad[0], from_handle(ctx->saved_data["group"].toInt()), bf16), torch::Tensor(),
            torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, torch::Tensor x, int64_t group,
                               const std::string& name) {
    return kept_collective([&] {
      const bool bf16 = bf16_wire(x);
      OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name);
      describe(name, bf16, bf16 ? kBf16AllReduceAlgorithm : nullptr);
      return summed(x, from_handle(group), bf16);
    });
  }
  static variable_list backward(AutogradContext*, variable_list grad) {
    return {grad[0], torch::Tensor(), torch::Tensor()};
  }
};

// Megatron's vocabulary-parallel cross entropy: each TP rank holds the logits of its slice of
// the vocabulary; three all-reduces (max, target logit, sum of exponentials) give every rank the
// exact loss without gathering the logits. The gradient needs no communication.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets,
                               int64_t group, int64_t vocab_start, const std::string& name) {
    auto* g = from_handle(group);
    const int64_t local_vocab = logits.size(-1);
    auto max = std::get<0>(logits.max(-1));
    // Two all-reduces, each its own node (the lowering's head.loss.max / head.loss.sum): the
    // maximum, then the target logit and the sum of exponentials stacked into one sum.
    if (g != nullptr) {
      OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name + ".max.all_reduce");
      std::vector<torch::Tensor> t{max};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::MAX;
      g->allreduce(t, opts)->wait();
    }
    auto shifted = logits - max.unsqueeze(-1);
    auto local_target = targets - vocab_start;
    auto in_range = (local_target >= 0).logical_and(local_target < local_vocab);
    auto index = local_target.clamp(0, local_vocab - 1);
    auto target_logit =
        shifted.gather(-1, index.unsqueeze(-1)).squeeze(-1) * in_range.to(shifted.scalar_type());
    auto exp = shifted.exp();
    auto sum_exp = exp.sum(-1);
    if (g != nullptr) {
      OpTrace::Scope scope(name.empty() ? nullptr : current_trace(), name + ".sum.all_reduce");
      auto both = torch::stack({target_logit, sum_exp});
      std::vector<torch::Tensor> t{both};
      g->allreduce(t)->wait();
      target_logit = both[0];
      sum_exp = both[1];
    }
    auto loss = (sum_exp.log() - target_logit).mean();
    ctx->save_for_backward({exp / sum_exp.unsqueeze(-1), index, in_range});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    const auto& softmax = saved[0];
    auto onehot = torch::zeros_like(softmax).scatter_(
        -1, saved[1].unsqueeze(-1), saved[2].to(softmax.scalar_type()).unsqueeze(-1));
    const double tokens = static_cast<double>(softmax.numel() / softmax.size(-1));
    return {(softmax - onehot) * (grad[0] / tokens), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tp_region(const torch::Tensor& x, const GroupPtr& tp,
                                const std::string& grad_name) {
  return tp ? CopyToTp::apply(x, as_handle(tp), grad_name) : x;
}

torch::Tensor reduce_from_tp_region(const torch::Tensor& x, const GroupPtr& tp,
                                    const std::string& name) {
  return tp ? ReduceFromTp::apply(x, as_handle(tp), name) : x;
}

torch::Tensor gather_from_sequence_region(const torch::Tensor& x, const GroupPtr& tp,
                                          bool reduce_grad, const std::string& name,
                                          const std::string& grad_name) {
  return tp ? GatherFromSeq::apply(x, as_handle(tp), reduce_grad, name, grad_name) : x;
}

torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, const GroupPtr& tp,
                                                const std::string& name,
                                                const std::string& grad_name) {
  return tp ? ReduceScatterToSeq::apply(x, as_handle(tp), name, grad_name) : x;
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits,
                                           const torch::Tensor& targets, const GroupPtr& tp,
                                           int64_t vocab_start, const std::string& name) {
  return VocabParallelCrossEntropy::apply(logits.reshape({-1, logits.size(-1)}),
                                          targets.reshape({-1}), tp ? as_handle(tp) : int64_t{0},
                                          vocab_start, name);
}

void all_reduce_sequence_parallel_gradients(const std::vector<ShardedParam>& params,
                                            const GroupPtr& tp) {
  if (!tp) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.sequence_parallel) grads.push_back(p.tensor.grad());
  }
  if (grads.empty()) return;
  std::vector<torch::Tensor> pieces;
  for (const auto& g : grads) pieces.push_back(g.reshape(-1));
  auto flat = torch::cat(pieces);
  all_reduce_sum(tp, flat);
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

double clip_gradients(const std::vector<ShardedParam>& params, const GroupPtr& tp,
                      const GroupPtr& pp, double max_norm, const GroupPtr& ep) {
  // fp64 sums on the gradients' device (the groups' collectives need them there).
  const auto options = params.empty() ? torch::TensorOptions(torch::kFloat64)
                                      : params.front().tensor.options().dtype(torch::kFloat64);
  auto sharded = torch::zeros({1}, options);
  auto replicated = torch::zeros({1}, options);
  // Routed experts split over EP (with ep == 1 they are replicated like the dense weights).
  auto expert_sharded = torch::zeros({1}, options);
  auto expert_replicated = torch::zeros({1}, options);
  for (const auto& p : params) {
    if (p.pipeline_copy) continue;
    auto& sum = p.expert && ep ? (p.shard_dim >= 0 ? expert_sharded : expert_replicated)
                               : (p.shard_dim >= 0 ? sharded : replicated);
    sum += p.tensor.grad().to(torch::kFloat64).pow(2).sum();
  }
  all_reduce_sum(tp, sharded);
  auto total = sharded + replicated;
  if (ep) {
    all_reduce_sum(tp, expert_sharded);
    auto experts = expert_sharded + expert_replicated;
    all_reduce_sum(ep, experts);
    total += experts;
  }
  all_reduce_sum(pp, total);
  const double norm = std::sqrt(total.item<double>());
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
      for (const auto& p : params) p.tensor.grad().mul_(coef);
    }
  }
  return norm;
}

torch::Tensor gather_full(const ShardedParam& param, const GroupPtr& tp) {
  const torch::Tensor local = param.tensor.detach().contiguous();
  if (param.shard_dim < 0 || !tp) return local;
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int i = 0; i < tp->getSize(); ++i) out[0].push_back(torch::empty_like(local));
  std::vector<torch::Tensor> in{local};
  tp->allgather(out, in)->wait();
  return torch::cat(out[0], param.shard_dim);
}

}  // namespace orrery::executor
