#include <cmath>

#include "parallel.hpp"

namespace orrery::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels through the autograd context as a raw pointer: the groups outlive training.
int64_t as_handle(const GroupPtr& g) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(g.get())); }
c10d::ProcessGroup* from_handle(int64_t h) { return reinterpret_cast<c10d::ProcessGroup*>(static_cast<intptr_t>(h)); }

torch::Tensor summed(const torch::Tensor& x, c10d::ProcessGroup* group) {
  std::vector<torch::Tensor> t{x.contiguous().clone()};
  group->allreduce(t)->wait();
  return t[0];
}

torch::Tensor seq_slice(const torch::Tensor& x, c10d::ProcessGroup* group) {
  const int64_t part = x.size(1) / group->getSize();
  return x.narrow(1, group->getRank() * part, part).contiguous();
}

torch::Tensor seq_gather(const torch::Tensor& x, c10d::ProcessGroup* group) {
  const torch::Tensor local = x.contiguous();
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int i = 0; i < group->getSize(); ++i) out[0].push_back(torch::empty_like(local));
  std::vector<torch::Tensor> in{local};
  group->allgather(out, in)->wait();
  return torch::cat(out[0], 1);
}

struct ScatterToSeq : torch::autograd::Function<ScatterToSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group) {
    ctx->saved_data["group"] = group;
    return seq_slice(x, from_handle(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {seq_gather(grad[0], from_handle(ctx->saved_data["group"].toInt())), torch::Tensor()};
  }
};

struct GatherFromSeq : torch::autograd::Function<GatherFromSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group, bool reduce_grad) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["reduce"] = reduce_grad;
    return seq_gather(x, from_handle(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* g = from_handle(ctx->saved_data["group"].toInt());
    const bool reduce = ctx->saved_data["reduce"].toBool();
    return {seq_slice(reduce ? summed(grad[0], g) : grad[0], g), torch::Tensor(), torch::Tensor()};
  }
};

struct ReduceScatterToSeq : torch::autograd::Function<ReduceScatterToSeq> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group) {
    ctx->saved_data["group"] = group;
    auto* g = from_handle(group);
    return seq_slice(summed(x, g), g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {seq_gather(grad[0], from_handle(ctx->saved_data["group"].toInt())), torch::Tensor()};
  }
};

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {summed(grad[0], from_handle(ctx->saved_data["group"].toInt())), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, torch::Tensor x, int64_t group) {
    return summed(x, from_handle(group));
  }
  static variable_list backward(AutogradContext*, variable_list grad) { return {grad[0], torch::Tensor()}; }
};

}  // namespace

torch::Tensor copy_to_tp_region(const torch::Tensor& x, const GroupPtr& tp) {
  return tp ? CopyToTp::apply(x, as_handle(tp)) : x;
}

torch::Tensor reduce_from_tp_region(const torch::Tensor& x, const GroupPtr& tp) {
  return tp ? ReduceFromTp::apply(x, as_handle(tp)) : x;
}

torch::Tensor scatter_to_sequence_region(const torch::Tensor& x, const GroupPtr& tp) {
  return tp ? ScatterToSeq::apply(x, as_handle(tp)) : x;
}

torch::Tensor gather_from_sequence_region(const torch::Tensor& x, const GroupPtr& tp, bool reduce_grad) {
  return tp ? GatherFromSeq::apply(x, as_handle(tp), reduce_grad) : x;
}

torch::Tensor reduce_scatter_to_sequence_region(const torch::Tensor& x, const GroupPtr& tp) {
  return tp ? ReduceScatterToSeq::apply(x, as_handle(tp)) : x;
}

void all_reduce_sequence_parallel_gradients(const std::vector<ShardedParam>& params, const GroupPtr& tp) {
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

int64_t all_reduce_gradients(const std::vector<ShardedParam>& params, const GroupPtr& dp, double bucket_bytes) {
  if (!dp) return 0;
  // Buckets in reverse order: the last layers' gradients are ready first in backward.
  std::vector<std::vector<torch::Tensor>> buckets(1);
  double filled = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const torch::Tensor& g = it->tensor.grad();
    const double bytes = static_cast<double>(g.numel() * g.element_size());
    if (!buckets.back().empty() && filled + bytes > bucket_bytes) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(g);
    filled += bytes;
  }
  std::vector<torch::Tensor> flat;
  std::vector<c10::intrusive_ptr<c10d::Work>> work;
  for (const auto& b : buckets) {
    std::vector<torch::Tensor> pieces;
    for (const auto& g : b) pieces.push_back(g.reshape(-1));
    std::vector<torch::Tensor> one{torch::cat(pieces)};
    work.push_back(dp->allreduce(one));
    flat.push_back(one[0]);
  }
  const double size = dp->getSize();
  for (size_t i = 0; i < buckets.size(); ++i) {
    work[i]->wait();
    flat[i].div_(size);
    int64_t offset = 0;
    for (auto& g : buckets[i]) {
      g.copy_(flat[i].narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }
  return static_cast<int64_t>(buckets.size());
}

double clip_gradients(const std::vector<ShardedParam>& params, const GroupPtr& tp, const GroupPtr& pp,
                      double max_norm) {
  auto sharded = torch::zeros({1}, torch::kFloat64);
  auto replicated = torch::zeros({1}, torch::kFloat64);
  for (const auto& p : params) {
    if (p.pipeline_copy) continue;
    (p.shard_dim >= 0 ? sharded : replicated) += p.tensor.grad().to(torch::kFloat64).pow(2).sum();
  }
  all_reduce_sum(tp, sharded);
  auto total = sharded + replicated;
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
