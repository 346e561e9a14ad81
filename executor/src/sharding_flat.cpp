#include "sharding_flat.hpp"

#include <algorithm>
#include <cmath>

#include "mixed_precision.hpp"

namespace orrery::executor {

void Pending::watch_work() {
  if (OpTrace* t = current_trace()) watch = t->watch([w = work] { return w->isCompleted(); });
}

void wait_timed(Pending& p, const std::string& name, const std::function<void()>& then) {
  OpTrace* trace = current_trace();
  if (trace != nullptr)
    trace->add(name, p.launched, p.watch ? p.watch->end_or_now() : Clock::now());
  OpTrace::Scope scope(trace, name);
  p.work->wait();
  if (then) then();
}

void start_reduce_scatter(Pending& p, const GroupPtr& group, const torch::Tensor& input,
                          bool bf16) {
  p.inputs = {bf16 ? input.to(torch::kBFloat16).contiguous() : input};
  p.outputs = {{torch::empty_like(p.inputs[0])}};
  std::vector<int64_t> equal_splits;
  auto out = gloo_view(p.outputs[0][0]), in = gloo_view(p.inputs[0]);
  p.work = group->alltoall_base(out, in, equal_splits, equal_splits);
}

torch::Tensor received_rows(const Pending& p) { return p.outputs[0][0].to(torch::kFloat); }

void start_all_reduce(Pending& p, const GroupPtr& group, const torch::Tensor& input, bool bf16) {
  if (!bf16) {
    p.inputs = {input};
    p.work = group->allreduce(p.inputs);
    return;
  }
  const int64_t n = group->getSize(), numel = input.numel(), piece = (numel + n - 1) / n;
  auto flat = input.reshape({-1});
  if (piece * n > numel)
    flat = torch::cat({flat, torch::zeros({piece * n - numel}, flat.options())});
  start_reduce_scatter(p, group, flat.view({n, piece}), true);
}

torch::Tensor all_reduced(Pending& p, const GroupPtr& group, int64_t numel, bool bf16) {
  if (!bf16) return p.inputs[0];
  const torch::Tensor mine = received_rows(p).sum(0).to(torch::kBFloat16);
  std::vector<std::vector<torch::Tensor>> out(1);
  std::vector<torch::Tensor> pieces;
  for (int64_t i = 0; i < group->getSize(); ++i) {
    pieces.push_back(torch::empty_like(mine));
    out[0].push_back(gloo_view(pieces.back()));
  }
  std::vector<torch::Tensor> in{gloo_view(mine)};
  group->allgather(out, in)->wait();
  return torch::cat(pieces).narrow(0, 0, numel).to(torch::kFloat);
}

torch::Tensor Flat::padded_grad(const std::vector<ShardedParam>& all) const {
  std::vector<torch::Tensor> pieces;
  for (size_t i : params) pieces.push_back(flat_grad(all[i]));
  if (chunk * size > numel) pieces.push_back(torch::zeros({chunk * size - numel}, shard.options()));
  return torch::cat(pieces);
}

void Flat::scatter_into(std::vector<ShardedParam>& all, const torch::Tensor& values) const {
  torch::NoGradGuard no_grad;
  for (size_t j = 0; j < params.size(); ++j) {
    all[params[j]].tensor.detach().view(-1).copy_(
        values.narrow(0, offsets[j], all[params[j]].tensor.numel()));
  }
}

Flat make_flat(const std::vector<ShardedParam>& params, const std::vector<size_t>& indices,
               int64_t size, int64_t rank, bool ep) {
  Flat f;
  f.params = indices;
  f.size = size;
  f.rank = rank;
  std::vector<torch::Tensor> values;
  for (size_t i : indices) {
    f.offsets.push_back(f.numel);
    f.shapes.push_back(params[i].tensor.sizes().vec());
    f.numel += params[i].tensor.numel();
    values.push_back(params[i].tensor.detach().reshape(-1));
  }
  f.chunk = (f.numel + size - 1) / size;
  if (f.chunk * size > f.numel) {
    values.push_back(torch::zeros({f.chunk * size - f.numel}, values.front().options()));
  }
  f.shard = torch::cat(values).narrow(0, rank * f.chunk, f.chunk).clone().set_requires_grad(true);
  const int64_t lo = rank * f.chunk, hi = lo + f.chunk;
  for (size_t j = 0; j < indices.size(); ++j) {
    const ShardedParam& p = params[indices[j]];
    const int64_t a = std::max(lo, f.offsets[j]);
    const int64_t b = std::min(hi, f.offsets[j] + p.tensor.numel());
    if (a >= b) continue;
    const int kind = (p.expert && ep ? 2 : 0) + (p.shard_dim >= 0 ? 0 : 1);
    if (!p.pipeline_copy) f.segments.push_back({a - lo, b - a, kind});
    if (p.sequence_parallel) f.tp_summed.push_back({a - lo, b - a, kind});
  }
  return f;
}

std::unique_ptr<Pending> launch_gather(const Flat& f, const GroupPtr& group, bool bf16) {
  auto p = std::make_unique<Pending>();
  const torch::Tensor chunk = bf16 ? f.shard.detach().to(at::kBFloat16) : f.shard.detach();
  p->outputs.resize(1);
  for (int64_t i = 0; i < f.size; ++i) p->outputs[0].push_back(gloo_view(torch::empty_like(chunk)));
  p->inputs = {gloo_view(chunk)};
  p->launched = Clock::now();
  p->work = group->allgather(p->outputs, p->inputs);
  p->watch_work();
  return p;
}

torch::Tensor gathered_flat(const Pending& p, const Flat& f, bool bf16) {
  const torch::Tensor all = torch::cat(p.outputs[0]);
  return bf16 ? all.view(at::kBFloat16).to(f.shard.scalar_type()) : all;
}

void copy_gathered(const Pending& p, const Flat& f, bool bf16, int64_t offset,
                   const torch::Tensor& dst) {
  torch::NoGradGuard no_grad;
  const torch::Tensor out = dst.view(-1);
  const int64_t end = offset + out.numel();
  for (int64_t k = offset / f.chunk; k < f.size && k * f.chunk < end; ++k) {
    const int64_t a = std::max(offset, k * f.chunk), b = std::min(end, (k + 1) * f.chunk);
    const torch::Tensor& chunk = p.outputs[0][static_cast<size_t>(k)];
    const torch::Tensor values = bf16 ? chunk.view(at::kBFloat16) : chunk;
    out.narrow(0, a - offset, b - a).copy_(values.narrow(0, a - k * f.chunk, b - a));
  }
}

torch::Tensor compute_copy(const torch::Tensor& t, bool bf16) {
  return bf16 ? t.to(at::kBFloat16).to(t.scalar_type()) : t;
}

torch::Tensor flat_grad(const ShardedParam& p) {
  const torch::Tensor& g = p.tensor.grad();
  return g.defined() ? g.reshape(-1)
                     : torch::zeros({p.tensor.numel()}, p.tensor.options().requires_grad(false));
}

namespace {

// Autograd's saved references share the storage and see it again once refilled; neither bumps
// their version counter. The storage's own allocator (the CPU's, or CUDA's caching allocator)
// serves both, so this works on any device.
void set_storage_bytes(const torch::Tensor& t, size_t bytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace

void free_storage(const torch::Tensor& t) { set_storage_bytes(t, 0); }

torch::Tensor refill_storage(const torch::Tensor& t) {
  set_storage_bytes(t, static_cast<size_t>(t.numel()) * t.element_size());
  torch::NoGradGuard no_grad;
  return torch::empty({0}, t.options())
      .set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

// ---- The chunks' gradients ----

void sum_tp_partial_chunks(const std::vector<FlatGroup*>& groups, const GroupPtr& tp) {
  if (!tp) return;
  for (FlatGroup* g : groups) {
    for (auto& f : g->flats) {
      if (f.tp_summed.empty() || !f.shard.grad().defined()) continue;
      std::vector<torch::Tensor> pieces;
      for (const auto& s : f.tp_summed)
        pieces.push_back(f.shard.grad().narrow(0, s.start, s.length));
      auto flat = torch::cat(pieces);
      all_reduce_sum(tp, flat);
      int64_t at = 0;
      for (const auto& s : f.tp_summed) {
        f.shard.mutable_grad().narrow(0, s.start, s.length).copy_(flat.narrow(0, at, s.length));
        at += s.length;
      }
    }
  }
}

namespace {

// fp64 on the chunks' device, for the norm's sums.
torch::TensorOptions sum_options(const std::vector<FlatGroup*>& groups) {
  for (const FlatGroup* g : groups) {
    if (!g->flats.empty()) return g->flats.front().shard.options().dtype(torch::kFloat64);
  }
  return torch::TensorOptions(torch::kFloat64);
}

// Sums of squares per kind (clip_gradients' four sums), each over its group, whose ranks hold
// disjoint chunks.
torch::Tensor chunk_square_sums(const std::vector<FlatGroup*>& groups) {
  auto sums = torch::zeros({4}, sum_options(groups));
  for (const FlatGroup* g : groups) {
    auto local = torch::zeros({4}, sum_options(groups));
    for (const auto& f : g->flats) {
      if (!f.shard.grad().defined()) continue;
      for (const auto& s : f.segments) {
        local[s.kind] +=
            f.shard.grad().narrow(0, s.start, s.length).to(torch::kFloat64).pow(2).sum();
      }
    }
    all_reduce_sum(g->group, local);
    sums += local;
  }
  return sums;
}

}  // namespace

double clip_chunks(const std::vector<FlatGroup*>& groups, std::vector<ShardedParam>& params,
                   const GroupPtr& tp, const GroupPtr& pp, const GroupPtr& ep, double max_norm) {
  const torch::Tensor sums = chunk_square_sums(groups);
  auto split = torch::stack({sums[0], sums[2]});  // TP-split tensors: summed over TP
  all_reduce_sum(tp, split);
  auto total = (split[0] + sums[1]).reshape({1});
  auto experts = (split[1] + sums[3]).reshape({1});
  all_reduce_sum(ep, experts);  // routed experts split over EP
  total += experts;
  all_reduce_sum(pp, total);
  const double norm = std::sqrt(total.item<double>());
  const double coef = max_norm / (norm + 1e-6);
  if (max_norm <= 0 || coef >= 1) return norm;
  for (FlatGroup* g : groups) {
    for (auto& f : g->flats) {
      if (f.shard.grad().defined()) f.shard.mutable_grad().mul_(coef);
    }
  }
  for (auto& p : params) {
    if (p.pipeline_copy && p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(coef);
  }
  return norm;
}

}  // namespace orrery::executor
