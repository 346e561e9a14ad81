#include <functional>
#include <map>
#include <numeric>

#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "recompute.hpp"
#include "sharding_fsdp.hpp"

namespace orrery::executor {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t as_handle(FsdpStrategy* o) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(o)); }
FsdpStrategy* from_handle(int64_t h) {
  return reinterpret_cast<FsdpStrategy*>(static_cast<intptr_t>(h));
}

// One bucket's gather: forward all-gathers the parameters (waiting for a prefetched gather),
// backward reduce-scatters their gradients into the chunk's.
struct GatherBucket : torch::autograd::Function<GatherBucket> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor shard, int64_t owner,
                               int64_t bucket, int64_t instance) {
    (void)shard;  // the gather reads it (launched maybe earlier); autograd needs it as the input
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["bucket"] = bucket;
    ctx->saved_data["instance"] = instance;
    return from_handle(owner)->forward_gather(bucket, instance);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* o = from_handle(ctx->saved_data["owner"].toInt());
    auto g = o->reduce_scatter(ctx->saved_data["bucket"].toInt(),
                               ctx->saved_data["instance"].toInt(), grads);
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Identity on a bucket's last part's output; its backward (which runs before the part's) gathers
// the bucket's parameters again.
struct PreBackward : torch::autograd::Function<PreBackward> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t owner,
                               int64_t bucket, int64_t instance) {
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["bucket"] = bucket;
    ctx->saved_data["instance"] = instance;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    from_handle(ctx->saved_data["owner"].toInt())
        ->backward_gather(ctx->saved_data["bucket"].toInt(), ctx->saved_data["instance"].toInt());
    return {grads[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

// ---- Set-up and the step ----

FsdpStrategy::FsdpStrategy(Transformer& model, const RankGroups& groups, const TrainConfig& c)
    : params_(model.mutable_parameters()),
      tp_(groups.tp),
      pp_(groups.pp),
      ep_(groups.ep),
      replica_(groups.dp_replica) {
  ORRERY_CHECK(!ep_, "fsdp with ep > 1 reached the executor (unsupported_reason rejects it)");
  ORRERY_CHECK(groups.dp_shard, "fsdp without a shard group reached the executor");
  bf16_ = c.plan.job().precision() == pb::PRECISION_BF16;
  bf16_grads_ = c.plan.grad_reduce_dtype() == pb::GRAD_REDUCE_DTYPE_BF16;
  prefetch_ = c.plan.prefetch_buckets();
  // The layout's shard group: dp itself without HSDP.
  shards_.group = groups.dp_shard;
  shards_.divisor = static_cast<double>(group_size(groups.dp_shard));
  add_buckets(c);
  // From here the parameters exist only as chunks; each forward gathers them.
  for (const Flat& f : shards_.flats) {
    for (size_t i : f.params) params_[i].tensor = torch::Tensor();
  }
}

void FsdpStrategy::add_buckets(const TrainConfig& c) {
  parts_ = parts_of(params_, [](const ShardedParam&) { return true; });
  for (size_t i = 0; i < parts_.size(); ++i) part_index_[parts_[i].name] = i;
  bucket_of_part_.assign(parts_.size(), 0);
  const bool has_head = part_index_.count("head") != 0;
  for (const auto& run : fsdp_buckets(parts_, c.plan)) {
    std::vector<size_t> indices;
    for (size_t i : run) {
      bucket_of_part_[i] = buckets_.size();
      indices.insert(indices.end(), parts_[i].params.begin(), parts_[i].params.end());
    }
    const std::string& first = parts_[run.front()].name;
    const std::string& last = parts_[run.back()].name;
    resident_.push_back(c.model.tied_embeddings() && has_head && first == "embed" &&
                        last != "head");
    buckets_.emplace_back(run.front(), run.back());
    shards_.flats.push_back(
        make_flat(params_, indices, group_size(shards_.group), group_rank(shards_.group), false));
  }
}

std::vector<torch::Tensor> FsdpStrategy::optimized() const {
  std::vector<torch::Tensor> out;
  for (const Flat& f : shards_.flats) out.push_back(f.shard);
  return out;
}

void FsdpStrategy::zero_grad() {
  // The model holds the last forward's gathered copies (not leaves), no gradients.
  for (auto& f : shards_.flats) f.shard.mutable_grad().reset();
  instances_.clear();
}

void FsdpStrategy::reduce_gradients() {
  finish_reduce();  // the last backward's reduce-scatter, still in flight
  replica_all_reduce();
  // Megatron's finalize-gradients all-reduces, which the simulator folds into the optimizer node
  // (they are small): SP/router gradients over TP, on the chunks.
  OpTrace::Scope scope(current_trace(), "opt.adamw");
  sum_tp_partial_chunks({&shards_}, tp_);
}

void FsdpStrategy::gather_parameters() {
  for (const Flat& f : shards_.flats) {
    const auto p = launch_gather(f, shards_.group, false);  // the fp32 masters
    p->work->wait();
    const auto values = gathered_flat(*p, f, false);
    for (size_t j = 0; j < f.params.size(); ++j) {
      const int64_t n =
          std::accumulate(f.shapes[j].begin(), f.shapes[j].end(), int64_t{1}, std::multiplies<>());
      params_[f.params[j]].tensor = values.narrow(0, f.offsets[j], n).view(f.shapes[j]).clone();
    }
  }
}

// ---- Forward ----

void FsdpStrategy::begin_micro_batch() {
  auto inst = std::make_unique<FsdpInstance>();
  inst->micro_batch = static_cast<int64_t>(instances_.size());
  inst->gathered.resize(buckets_.size());
  inst->forward.resize(buckets_.size());
  inst->backward.resize(buckets_.size());
  instances_.push_back(std::move(inst));
}

void FsdpStrategy::before_forward(const std::string& part) {
  const auto it = part_index_.find(part);
  if (it == part_index_.end()) return;
  const size_t index = it->second;
  if (index == 0) begin_micro_batch();  // the stage's first part: a new micro-batch
  ORRERY_CHECK(!instances_.empty(), "FSDP: a forward pass began after its first part");
  const size_t bucket = bucket_of_part_[index];
  if (buckets_[bucket].first != index) return;
  FsdpInstance& inst = *instances_.back();
  launch(inst, bucket, false);
  for (int64_t k = 1; k <= prefetch_ && bucket + static_cast<size_t>(k) < buckets_.size(); ++k) {
    launch(inst, bucket + static_cast<size_t>(k), false);
  }
  const Flat& f = shards_.flats[bucket];
  const int64_t instance = static_cast<int64_t>(instances_.size()) - 1;
  inst.gathered[bucket] =
      GatherBucket::apply(f.shard, as_handle(this), static_cast<int64_t>(bucket), instance);
  for (size_t j = 0; j < f.params.size(); ++j)
    params_[f.params[j]].tensor = inst.gathered[bucket][j];
}

torch::Tensor FsdpStrategy::after_forward(const std::string& part, const torch::Tensor& output) {
  const auto it = part_index_.find(part);
  if (it == part_index_.end() || instances_.empty()) return output;
  const size_t bucket = bucket_of_part_[it->second];
  if (buckets_[bucket].second != it->second || resident_[bucket]) return output;
  const int64_t instance = static_cast<int64_t>(instances_.size()) - 1;
  torch::Tensor out = output;
  if (output.requires_grad()) {
    out = PreBackward::apply(output, as_handle(this), static_cast<int64_t>(bucket), instance);
  }
  for (const auto& t : instances_.back()->gathered[bucket]) free_storage(t);
  return out;
}

// ---- Gathers ----

void FsdpStrategy::launch(FsdpInstance& inst, size_t bucket, bool backward) {
  auto& slot = (backward ? inst.backward : inst.forward)[bucket];
  if (slot || (backward && resident_[bucket])) return;
  slot = launch_gather(shards_.flats[bucket], shards_.group, bf16_);
}

std::string FsdpStrategy::node_name(const FsdpInstance& inst, size_t bucket, Site site,
                                    const char* op) const {
  const auto& [first, last] = buckets_[bucket];
  const ModelPart& part = parts_[site == Site::kBackwardGather ? last : first];
  // The lowering gathers a bucket whose last part is a wholly recomputed layer for that layer's
  // recomputation (phase "rcp"), which runs right after it, before the layer's backward.
  const char* phase =
      site == Site::kForward                                                             ? "fwd"
      : site == Site::kBackwardGather && part.layer >= 0 && recomputes_layer(part.layer) ? "rcp"
                                                                                         : "bwd";
  return fsdp_node_name(part, inst.micro_batch, phase, op);
}

std::unique_ptr<Pending> FsdpStrategy::finish(FsdpInstance& inst, size_t bucket, bool backward) {
  launch(inst, bucket, backward);
  auto& slot = (backward ? inst.backward : inst.forward)[bucket];
  const std::string name =
      node_name(inst, bucket, backward ? Site::kBackwardGather : Site::kForward, "fsdp.all_gather");
  wait_timed(*slot, name);
  if (OpTrace* t = current_trace(); t != nullptr && bf16_) t->set_dtype(name, "bf16");
  return std::move(slot);
}

std::vector<torch::Tensor> FsdpStrategy::forward_gather(int64_t bucket, int64_t instance) {
  FsdpInstance& inst = *instances_[static_cast<size_t>(instance)];
  const size_t b = static_cast<size_t>(bucket);
  const Flat& f = shards_.flats[b];
  const auto done = finish(inst, b, false);
  // The copy-out: the gathered chunks copied into the parameters' own tensors.
  OpTrace::Scope scope(current_trace(), node_name(inst, b, Site::kForward, "fsdp.copy_out"));
  std::vector<torch::Tensor> out;
  for (size_t j = 0; j < f.params.size(); ++j) {
    out.push_back(torch::empty(f.shapes[j], f.shard.options()));
    copy_gathered(*done, f, bf16_, f.offsets[j], out.back());
  }
  return out;
}

void FsdpStrategy::backward_gather(int64_t bucket, int64_t instance) {
  FsdpInstance& inst = *instances_[static_cast<size_t>(instance)];
  const size_t b = static_cast<size_t>(bucket);
  launch(inst, b, true);
  // Prefetch: the buckets the backward pass reaches next (lower indices).
  for (int64_t k = 1; k <= prefetch_ && static_cast<int64_t>(b) - k >= 0; ++k) {
    launch(inst, b - static_cast<size_t>(k), true);
  }
  const Flat& f = shards_.flats[b];
  const auto done = finish(inst, b, true);
  // The copy-out, into the storages the forward's tensors (saved for backward) still point to.
  OpTrace::Scope scope(current_trace(), node_name(inst, b, Site::kBackwardGather, "fsdp.copy_out"));
  for (size_t j = 0; j < f.params.size(); ++j) {
    const auto& t = inst.gathered[b][j];
    copy_gathered(*done, f, bf16_, f.offsets[j], refill_storage(t));
  }
}

// ---- Gradient reduction ----

torch::Tensor FsdpStrategy::copy_in(const FsdpInstance& inst, size_t bucket,
                                    const std::vector<torch::Tensor>& grads) {
  // The copy-in: the bucket's gradients packed into one flat vector, padded to the chunks.
  OpTrace::Scope scope(current_trace(), node_name(inst, bucket, Site::kReduction, "fsdp.copy_in"));
  const Flat& f = shards_.flats[bucket];
  std::vector<torch::Tensor> pieces;
  for (size_t j = 0; j < f.params.size(); ++j) {
    const auto& t = inst.gathered[bucket][j];
    pieces.push_back(j < grads.size() && grads[j].defined()
                         ? grads[j].reshape(-1)
                         : torch::zeros({t.numel()}, t.options()));
  }
  if (f.chunk * f.size > f.numel) {
    pieces.push_back(torch::zeros({f.chunk * f.size - f.numel}, f.shard.options()));
  }
  torch::Tensor input = torch::cat(pieces);
  // The gathered copy is no longer needed: every use of it has run its backward.
  for (const auto& t : inst.gathered[bucket]) free_storage(t);
  return input;
}

torch::Tensor FsdpStrategy::reduce_scatter(int64_t bucket, int64_t instance,
                                           const std::vector<torch::Tensor>& grads) {
  FsdpInstance& inst = *instances_[static_cast<size_t>(instance)];
  const size_t b = static_cast<size_t>(bucket);
  // One reduce-scatter in flight, as FSDP2 keeps it: the previous one finishes (into its shard's
  // gradient) before this one's copy-in, which bounds the buffers to one bucket's.
  finish_reduce();
  auto rs = std::make_unique<FsdpReduce>();
  rs->bucket = b;
  rs->name = node_name(inst, b, Site::kReduction, "fsdp.reduce_scatter");
  const torch::Tensor input = copy_in(inst, b, grads);
  // Reduce-scatter as alltoall_base + local sum (Gloo 1.13 has no reduce-scatter), launched and
  // left in flight beside the next layers' backward, as the lowering has it on its own stream.
  Pending& p = rs->pending;
  p.launched = Clock::now();
  start_reduce_scatter(p, shards_.group, input, bf16_grads_);
  p.watch_work();
  if (OpTrace* t = current_trace()) {
    t->set_algorithm(rs->name, kReduceScatterAlgorithm);
    if (bf16_grads_) t->set_dtype(rs->name, "bf16");
  }
  reduce_ = std::move(rs);
  // The shard's gradient comes from finish_reduce, not through autograd.
  return torch::Tensor();
}

void FsdpStrategy::finish_reduce() {
  if (!reduce_) return;
  FsdpReduce& rs = *reduce_;
  Flat& f = shards_.flats[rs.bucket];
  // The reduce-scatter's own reduction: the size rows received, summed in rank order, averaged,
  // and accumulated into the shard's gradient (over the step's micro-batches).
  wait_timed(rs.pending, rs.name, [&] {
    auto reduced = received_rows(rs.pending).view({f.size, f.chunk}).sum(0).div_(shards_.divisor);
    if (f.shard.grad().defined()) {
      f.shard.mutable_grad().add_(reduced);
    } else {
      f.shard.mutable_grad() = reduced;
    }
  });
  reduce_.reset();
}

void FsdpStrategy::replica_all_reduce() {
  if (!replica_) return;
  // Every chunk's gradient in one flat vector (zeros for a chunk that got none), all-reduced and
  // averaged over the replicas: each shard group's reduce-scatter averaged over its own ranks,
  // so the result is the mean over dp.
  std::vector<torch::Tensor> pieces;
  for (const Flat& f : shards_.flats) {
    pieces.push_back(f.shard.grad().defined() ? f.shard.grad() : torch::zeros_like(f.shard));
  }
  const std::string name = "opt.hsdp.replica_all_reduce";
  const torch::Tensor flat = torch::cat(pieces);
  Pending p;
  p.launched = Clock::now();
  start_all_reduce(p, replica_, flat, bf16_grads_);
  wait_timed(p, name, [&] {
    const torch::Tensor sum = all_reduced(p, replica_, flat.numel(), bf16_grads_)
                                  .div_(static_cast<double>(group_size(replica_)));
    int64_t at = 0;
    for (Flat& f : shards_.flats) {
      f.shard.mutable_grad() = sum.narrow(0, at, f.shard.numel()).view_as(f.shard);
      at += f.shard.numel();
    }
  });
  if (OpTrace* t = current_trace(); t != nullptr && bf16_grads_) {
    t->set_algorithm(name, kBf16AllReduceAlgorithm);
    t->set_dtype(name, "bf16");
  }
}

std::unique_ptr<ShardingStrategy> make_fsdp_strategy(Transformer& model, const RankGroups& groups,
                                                     const TrainConfig& config) {
  return std::make_unique<FsdpStrategy>(model, groups, config);
}

}  // namespace orrery::executor
