#include "parallel_sharding.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <set>

#include "grad_ready.hpp"
#include "mixed_precision.hpp"
#include "op_trace.hpp"
#include "orrery/executor/data_parallel.hpp"
#include "orrery/plan/buckets.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/base/error.hpp"

namespace orrery::executor {

using Clock = TraceClock;  // op_trace.hpp: the trace's clock (CUDA events on a GPU)
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- The grouping rule (data_parallel.hpp) ----

std::string parameter_part(const std::string& name) {
  if (name.rfind("head.", 0) == 0) return "head";
  if (name.rfind("embed.", 0) == 0) return "embed";
  if (name.rfind("layers.", 0) == 0) {
    const size_t end = name.find('.', 7);
    return "L" + name.substr(7, end == std::string::npos ? std::string::npos : end - 7);
  }
  throw base::InternalError("parameter " + name + " belongs to no part of the model (embed, layers.<i>, head)");
}

namespace {

// Forward position of a part: embed, L0, L1, ..., head.
int64_t part_order(const std::string& part) {
  if (part == "embed") return -1;
  if (part == "head") return INT64_MAX;
  return std::stoll(part.substr(1));
}

std::vector<ModelPart> parts_of(const std::vector<ShardedParam>& params,
                                const std::function<bool(const ShardedParam&)>& keep) {
  std::vector<ModelPart> parts;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) {
    const ShardedParam& p = params[i];
    // A pipeline stage's copy of the tied embedding is in no part (data_parallel.hpp).
    if (p.pipeline_copy || !keep(p)) continue;
    const std::string name = parameter_part(p.name);
    auto [it, added] = index.emplace(name, parts.size());
    if (added) {
      ModelPart part;
      part.name = name;
      part.layer = name[0] == 'L' ? part_order(name) : -1;
      parts.push_back(part);
    }
    ModelPart& part = parts[it->second];
    part.params.push_back(i);
    part.numel += p.tensor.numel();
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const ModelPart& a, const ModelPart& b) { return part_order(a.name) < part_order(b.name); });
  return parts;
}

// What a reduce-scatter really runs on Gloo 1.13 (recorded in the measured trace).
constexpr const char* kReduceScatterAlgorithm = "alltoall+sum";

// Bytes per parameter in the ZeRO/FSDP gathers, the lowering's param_bytes: fp32 runs gather
// their fp32 weights, every other precision a 2-byte compute copy (bf16 here). FSDP buckets are
// measured in these bytes too.
double parameter_bytes(pb::Precision p) { return p == pb::PRECISION_FP32 ? 4 : 2; }

int64_t as_handle(DataParallelOptimizer* o) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(o)); }
DataParallelOptimizer* from_handle(int64_t h) { return reinterpret_cast<DataParallelOptimizer*>(static_cast<intptr_t>(h)); }

// Frees a tensor's memory, keeping its shape, and gives it back. Autograd's saved references
// share the storage and see it again once refilled; neither bumps their version counter. The
// storage's own allocator (the CPU's, or CUDA's caching allocator) serves both, so this works on
// any device.
void set_storage_bytes(const torch::Tensor& t, size_t bytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}
void free_storage(const torch::Tensor& t) { set_storage_bytes(t, 0); }
// Gives `t`'s freed storage its bytes back and returns a second tensor over it to write the
// values through: that one has a version counter of its own, so autograd, which saved `t` for
// backward, does not see it modified.
torch::Tensor refill_storage(const torch::Tensor& t) {
  set_storage_bytes(t, static_cast<size_t>(t.numel()) * t.element_size());
  torch::NoGradGuard no_grad;
  return torch::empty({0}, t.options()).set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

// Gradient of `p` flattened (zeros when it got none).
torch::Tensor flat_grad(const ShardedParam& p) {
  const torch::Tensor& g = p.tensor.grad();
  return g.defined() ? g.reshape(-1) : torch::zeros({p.tensor.numel()}, p.tensor.options().requires_grad(false));
}

}  // namespace

std::vector<ModelPart> model_parts(const std::vector<ShardedParam>& params, bool experts) {
  return parts_of(params, [experts](const ShardedParam& p) { return p.expert == experts; });
}

std::vector<GradBucket> gradient_buckets(const std::vector<ModelPart>& parts, double bucket_params,
                                         const std::string& group_name, bool reduce_scatter) {
  std::vector<double> sizes;  // backward order
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) sizes.push_back(it->numel);
  std::vector<GradBucket> out;
  for (const auto& run : plan::gradient_buckets(sizes, bucket_params)) {
    GradBucket b;
    b.name = "opt." + group_name + ".bucket" + std::to_string(out.size()) + "." +
             (reduce_scatter ? "reduce_scatter" : "all_reduce");
    for (size_t j : run) {
      const size_t forward = parts.size() - 1 - j;
      b.parts.push_back(forward);
      b.numel += parts[forward].numel;
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::string fsdp_node_name(const ModelPart& part, int64_t micro_batch, const char* phase, const std::string& op) {
  return part.layer >= 0 ? site_name(part.layer, micro_batch, phase, op)
                         : site_name(-1, micro_batch, phase, part.name + "." + op);
}

// ---- State ----

struct DataParallelOptimizer::Flat {
  // A run of the chunk for the gradient norm: [start, start + length) of the chunk, `kind` as
  // clip_gradients sums it (0 TP-split, 1 replicated, 2 expert TP-split, 3 expert replicated).
  struct Segment {
    int64_t start = 0, length = 0;
    int kind = 0;
  };
  std::vector<size_t> params;  // model indices, in flat order
  std::vector<int64_t> offsets;
  std::vector<std::vector<int64_t>> shapes;
  int64_t numel = 0, chunk = 0, size = 1, rank = 0;
  torch::Tensor shard;                 // this rank's chunk: the leaf AdamW updates
  std::vector<Segment> segments;       // counted in the norm (pipeline copies left out)
  std::vector<Segment> tp_summed;      // gradients summed over TP (SP norms, MoE partial sums)

  // The parameters' gradients as one vector of size x chunk (zero padding at the end).
  torch::Tensor padded_grad(const std::vector<ShardedParam>& all) const {
    std::vector<torch::Tensor> pieces;
    for (size_t i : params) pieces.push_back(flat_grad(all[i]));
    if (chunk * size > numel) pieces.push_back(torch::zeros({chunk * size - numel}, shard.options()));
    return torch::cat(pieces);
  }
  // Writes the full flat vector `values` ([>= numel]) into the parameters.
  void scatter_into(std::vector<ShardedParam>& all, const torch::Tensor& values) const {
    torch::NoGradGuard no_grad;
    for (size_t j = 0; j < params.size(); ++j) {
      all[params[j]].tensor.detach().view(-1).copy_(values.narrow(0, offsets[j], all[params[j]].tensor.numel()));
    }
  }
};

struct DataParallelOptimizer::Pending {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<std::vector<torch::Tensor>> outputs;
  std::vector<torch::Tensor> inputs;
  Clock::time_point launched;
  // Polled at every op boundary while it is in flight (OpTrace::watch): where it was first seen
  // complete, when that was before the rank waited for it.
  std::shared_ptr<const OpTrace::Watch> watch;

  // Once `work` and `launched` are set: polls the work from the next boundary on.
  void watch_work() {
    if (OpTrace* t = current_trace()) watch = t->watch([w = work] { return w->isCompleted(); });
  }
};

namespace {

// Waits for `p`, then runs `then` (the local part of the collective), and times it as `name`:
// from its launch to the first op boundary it was seen complete at (or to now, when it was not),
// then the wait and `then` as a scope (which pauses an open backward segment).
void wait_timed(DataParallelOptimizer::Pending& p, const std::string& name, const std::function<void()>& then = {}) {
  OpTrace* trace = current_trace();
  if (trace != nullptr) trace->add(name, p.launched, p.watch ? p.watch->end_or_now() : Clock::now());
  OpTrace::Scope scope(trace, name);
  p.work->wait();
  if (then) then();
}

}  // namespace

struct DataParallelOptimizer::Reduction {
  bool experts = false;
  GroupPtr group;  // null: one member, nothing to reduce
  double divisor = 1;
  std::string group_name;  // "dp", "edp"
  std::vector<ModelPart> parts;
  std::vector<GradBucket> buckets;
  std::vector<Flat> flats;  // kZero: one per part, parts order
  std::vector<std::unique_ptr<Pending>> inflight;  // per bucket, launched and not yet waited
  std::unique_ptr<BucketReadiness> readiness;     // overlap_grad_reduce: launches them in backward
};

struct DataParallelOptimizer::ZeroGather {
  std::string part, name, copy_name;  // the gather's node and its copy-out's
  Reduction* reduction = nullptr;
  size_t index = 0;  // into reduction->parts and ->flats
  std::unique_ptr<Pending> pending;  // null: a one-member group, nothing to gather
};

// FSDP's reduce-scatter in flight (at most one): node name, bucket, the work.
struct DataParallelOptimizer::FsdpReduce {
  std::string name;
  size_t bucket = 0;
  Pending pending;
};

struct DataParallelOptimizer::Instance {
  int64_t micro_batch = 0;
  std::vector<std::vector<torch::Tensor>> gathered;  // per bucket: the parameters the forward used
  std::vector<std::unique_ptr<Pending>> forward, backward;
};

namespace {

// Lays `indices` of `params` out as one flat vector split into `size` chunks, and takes chunk
// `rank` as a leaf. `ep`: experts are split over EP (counted apart in the norm).
DataParallelOptimizer::Flat make_flat(const std::vector<ShardedParam>& params, const std::vector<size_t>& indices,
                                      int64_t size, int64_t rank, bool ep) {
  DataParallelOptimizer::Flat f;
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
  if (f.chunk * size > f.numel) values.push_back(torch::zeros({f.chunk * size - f.numel}, values.front().options()));
  f.shard = torch::cat(values).narrow(0, rank * f.chunk, f.chunk).clone().set_requires_grad(true);
  const int64_t lo = rank * f.chunk, hi = lo + f.chunk;
  for (size_t j = 0; j < indices.size(); ++j) {
    const ShardedParam& p = params[indices[j]];
    const int64_t a = std::max(lo, f.offsets[j]), b = std::min(hi, f.offsets[j] + p.tensor.numel());
    if (a >= b) continue;
    const int kind = (p.expert && ep ? 2 : 0) + (p.shard_dim >= 0 ? 0 : 1);
    if (!p.pipeline_copy) f.segments.push_back({a - lo, b - a, kind});
    if (p.sequence_parallel) f.tp_summed.push_back({a - lo, b - a, kind});
  }
  return f;
}

// Launches the all-gather of `f`'s chunks over `group`: the fp32 masters as they are, or (`bf16`)
// their bf16 copies, carried as fp16 bytes (mixed_precision.hpp), as the lowering's param_bytes 2
// has it.
std::unique_ptr<DataParallelOptimizer::Pending> launch_gather(const DataParallelOptimizer::Flat& f, const GroupPtr& group,
                                                              bool bf16) {
  auto p = std::make_unique<DataParallelOptimizer::Pending>();
  const torch::Tensor chunk = bf16 ? f.shard.detach().to(at::kBFloat16) : f.shard.detach();
  p->outputs.resize(1);
  for (int64_t i = 0; i < f.size; ++i) p->outputs[0].push_back(gloo_view(torch::empty_like(chunk)));
  p->inputs = {gloo_view(chunk)};
  p->launched = Clock::now();
  p->work = group->allgather(p->outputs, p->inputs);
  p->watch_work();
  return p;
}

// A finished gather's flat vector in the masters' type: under bf16 the bf16-rounded parameters,
// which the model computes with (autocast's casts of them to bf16 are then exact).
torch::Tensor gathered_flat(const DataParallelOptimizer::Pending& p, const DataParallelOptimizer::Flat& f, bool bf16) {
  const torch::Tensor all = torch::cat(p.outputs[0]);
  return bf16 ? all.view(at::kBFloat16).to(f.shard.scalar_type()) : all;
}

// FSDP's copy-out of a finished gather: the gathered values [offset, offset + dst.numel()) of `f`
// written into `dst` (contiguous, the masters' type) straight from the gather's per-rank chunks,
// converted from bf16 on the way under `bf16`. One read and one write of the bytes, as the
// lowering's fsdp.copy_out counts them; gathered_flat first would concatenate them, a second copy.
void copy_gathered(const DataParallelOptimizer::Pending& p, const DataParallelOptimizer::Flat& f, bool bf16,
                   int64_t offset, const torch::Tensor& dst) {
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

// The values the model computes with for master values `t`: bf16-rounded under `bf16`.
torch::Tensor compute_copy(const torch::Tensor& t, bool bf16) {
  return bf16 ? t.to(at::kBFloat16).to(t.scalar_type()) : t;
}

// One bucket's FSDP gather: forward all-gathers the parameters (waiting for a prefetched gather),
// backward reduce-scatters their gradients into the chunk's.
struct GatherBucket : torch::autograd::Function<GatherBucket> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor shard, int64_t owner, int64_t bucket,
                               int64_t instance) {
    (void)shard;  // the gather reads it (launched maybe earlier); autograd needs it as the input
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["bucket"] = bucket;
    ctx->saved_data["instance"] = instance;
    return from_handle(owner)->fsdp_forward_gather(bucket, instance);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* o = from_handle(ctx->saved_data["owner"].toInt());
    auto g = o->fsdp_reduce_scatter(ctx->saved_data["bucket"].toInt(), ctx->saved_data["instance"].toInt(), grads);
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Identity on a bucket's last part's output; its backward (which runs before the part's) gathers
// the bucket's parameters again.
struct PreBackward : torch::autograd::Function<PreBackward> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t owner, int64_t bucket,
                               int64_t instance) {
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["bucket"] = bucket;
    ctx->saved_data["instance"] = instance;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    from_handle(ctx->saved_data["owner"].toInt())
        ->fsdp_backward_gather(ctx->saved_data["bucket"].toInt(), ctx->saved_data["instance"].toInt());
    return {grads[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

int64_t group_size(const GroupPtr& g) { return g ? g->getSize() : 1; }
int64_t group_rank(const GroupPtr& g) { return g ? g->getRank() : 0; }

}  // namespace

// ---- Set-up ----

DataParallelOptimizer::DataParallelOptimizer(Transformer& model, const RankGroups& groups, const TrainConfig& c,
                                             int64_t ep_size)
    : model_(model), params_(model.mutable_parameters()), tp_(groups.tp), pp_(groups.pp),
      embedding_(groups.embedding), ep_(groups.ep) {
  const auto sharding = c.plan.sharding();
  const bool fsdp = sharding == pb::SHARDING_ZERO3 || sharding == pb::SHARDING_FSDP;
  const bool zero = sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2;
  ORRERY_CHECK(sharding != pb::SHARDING_HSDP, "hsdp reached the executor (unsupported_reason rejects it)");
  // Without a DP group there is nothing to shard: the lowering has no data-parallel collectives.
  mode_ = !groups.dp ? Mode::kReplicated : fsdp ? Mode::kFsdp : zero ? Mode::kZero : Mode::kReplicated;
  zero2_ = sharding == pb::SHARDING_ZERO2;
  // Sharded bf16: the model computes with bf16 copies of the fp32 master chunks (see the header).
  bf16_ = c.plan.job().precision() == pb::PRECISION_BF16 && mode_ != Mode::kReplicated;
  overlap_grad_ = c.plan.overlap_grad_reduce() && mode_ != Mode::kFsdp;  // FSDP reduces in backward anyway
  overlap_param_gather_ = c.plan.overlap_param_gather() && mode_ == Mode::kZero;  // only ZeRO-1/2 gather after the step
  last_micro_batch_ = c.plan.job().global_batch_size() / (group_size(groups.dp) * c.plan.micro_batch_size()) - 1;
  opt_ = {c.learning_rate, c.beta1, c.beta2, c.adam_eps, c.weight_decay, c.clip_grad_norm};
  prefetch_ = c.plan.prefetch_buckets();
  const int64_t dp = group_size(groups.dp);
  const double bucket_params = plan::gradient_bucket_params(c.plan, plan::degrees_of(c.plan.parallel()).dp, plan::precisions_of(c.plan.job().precision()).grad_bytes);
  std::vector<torch::Tensor> optimized;

  if (mode_ == Mode::kFsdp) {
    ORRERY_CHECK(!ep_, "fsdp with ep > 1 reached the executor (unsupported_reason rejects it)");
    auto r = std::make_unique<Reduction>();
    r->group = groups.dp;
    r->divisor = static_cast<double>(dp);
    r->group_name = "dp";
    fsdp_parts_ = parts_of(params_, [](const ShardedParam&) { return true; });
    std::vector<double> sizes;
    for (size_t i = 0; i < fsdp_parts_.size(); ++i) {
      fsdp_part_index_[fsdp_parts_[i].name] = i;
      sizes.push_back(fsdp_parts_[i].numel);
    }
    // Units gathered together, up to bucket_bytes of gathered parameters (the lowering's rule).
    const double limit =
        c.plan.bucket_bytes() > 0 ? c.plan.bucket_bytes() / parameter_bytes(c.plan.job().precision()) : 0;
    fsdp_bucket_of_part_.assign(fsdp_parts_.size(), 0);
    const bool has_head = fsdp_part_index_.count("head") != 0;
    for (const auto& run : plan::gradient_buckets(sizes, limit)) {
      std::vector<size_t> indices;
      for (size_t i : run) {
        fsdp_bucket_of_part_[i] = fsdp_buckets_.size();
        indices.insert(indices.end(), fsdp_parts_[i].params.begin(), fsdp_parts_[i].params.end());
      }
      const std::string& first = fsdp_parts_[run.front()].name;
      const std::string& last = fsdp_parts_[run.back()].name;
      fsdp_resident_.push_back(c.model.tied_embeddings() && has_head && first == "embed" && last != "head");
      fsdp_buckets_.emplace_back(run.front(), run.back());
      r->flats.push_back(make_flat(params_, indices, dp, group_rank(groups.dp), false));
    }
    // From here the parameters exist only as chunks; each forward gathers them.
    for (const Flat& f : r->flats) {
      optimized.push_back(f.shard);
      for (size_t i : f.params) params_[i].tensor = torch::Tensor();
    }
    reductions_.push_back(std::move(r));
    model_.set_part_hooks(this);
  } else {
    for (const bool experts : {false, true}) {
      auto r = std::make_unique<Reduction>();
      r->experts = experts;
      // Routed experts: averaged over the expert-data-parallel group, then by ep (model_moe.hpp).
      r->group = experts ? groups.edp : groups.dp;
      r->divisor = static_cast<double>(experts ? group_size(groups.edp) * ep_size : dp);
      r->group_name = experts ? "edp" : "dp";
      r->parts = model_parts(params_, experts);
      if (r->parts.empty()) continue;
      r->buckets = gradient_buckets(r->parts, bucket_params, r->group_name, mode_ == Mode::kZero);
      r->inflight.resize(r->buckets.size());
      if (mode_ == Mode::kZero) {
        for (const ModelPart& part : r->parts) {
          r->flats.push_back(make_flat(params_, part.params, group_size(r->group), group_rank(r->group), ep_ != nullptr));
          optimized.push_back(r->flats.back().shard);
        }
        // The first step computes with the bf16 copies too, as every later one does.
        if (bf16_) {
          for (const Flat& f : r->flats) {
            for (size_t i : f.params) params_[i].tensor.detach().copy_(compute_copy(params_[i].tensor.detach(), true));
          }
        }
      } else {
        for (const ModelPart& part : r->parts) {
          for (size_t i : part.params) optimized.push_back(params_[i].tensor);
        }
      }
      reductions_.push_back(std::move(r));
    }
    // The last stage's copy of a tied embedding: full, never sharded.
    for (const auto& p : params_) {
      if (p.pipeline_copy) optimized.push_back(p.tensor);
    }
    if (overlap_param_gather_) model_.set_part_hooks(this);
    if (overlap_grad_) {
      for (auto& r : reductions_) {
        if (!r->group) continue;
        std::vector<std::vector<torch::Tensor>> members;
        std::vector<bool> deferred;
        for (const auto& b : r->buckets) {
          members.emplace_back();
          bool embed = false;
          for (size_t part : b.parts) {
            embed = embed || r->parts[part].name == "embed";
            for (size_t i : r->parts[part].params) members.back().push_back(params_[i].tensor);
          }
          // The first stage's tied embedding gets the last stage's gradient after backward.
          deferred.push_back(embed && groups.embedding != nullptr);
        }
        Reduction* raw = r.get();
        r->readiness = std::make_unique<BucketReadiness>(
            members, deferred, [this] { return current_micro_batch() == last_micro_batch_; },
            [this, raw](size_t k) { launch_bucket(*raw, k); });
      }
    }
  }
  dp_ = groups.dp;
  adamw_ = std::make_unique<torch::optim::AdamW>(optimized, torch::optim::AdamWOptions(opt_.learning_rate)
                                                                .betas({opt_.beta1, opt_.beta2})
                                                                .eps(opt_.eps)
                                                                .weight_decay(opt_.weight_decay));
}

DataParallelOptimizer::~DataParallelOptimizer() {
  if (mode_ == Mode::kFsdp || overlap_param_gather_) model_.set_part_hooks(nullptr);
}

void DataParallelOptimizer::zero_grad() {
  for (auto& p : params_) {
    // FSDP: the model holds the last forward's gathered copies (not leaves), no gradients.
    if (mode_ == Mode::kFsdp || !p.tensor.grad().defined()) continue;
    if (zero2_) {
      p.tensor.mutable_grad().reset();
    } else {
      p.tensor.mutable_grad().detach_();
      p.tensor.mutable_grad().zero_();
    }
  }
  for (auto& r : reductions_) {
    for (auto& f : r->flats) f.shard.mutable_grad().reset();
    if (r->readiness) r->readiness->reset();
  }
  instances_.clear();
  // The previous step's updated chunks (the initial ones in step 1: the same values) travel while
  // the forward passes run; each part waits for its own (before_forward).
  if (overlap_param_gather_) launch_zero_gathers();
}

// ---- The step ----

double DataParallelOptimizer::step() {
  finish_zero_gathers("");  // every part ran forward; none should be left, but AdamW must not race one
  finish_fsdp_reduce();     // the last backward's reduce-scatter, still in flight
  if (overlap_grad_) {
    // The buckets launched in backward are in flight; the tied embedding's sum over stages
    // precedes the rest, the TP sums follow the DP reduction (data_parallel.hpp's order).
    {
      OpTrace::Scope scope(current_trace(), "opt.adamw");
      sum_tied_embedding();
    }
    for (auto& r : reductions_) {
      if (r->readiness) r->readiness->launch_rest();
      reduce(*r);
    }
    OpTrace::Scope scope(current_trace(), "opt.adamw");
    if (mode_ == Mode::kReplicated) all_reduce_sequence_parallel_gradients(params_, tp_);
    else sum_tp_partial_chunks();
  } else {
    finish_gradients();
    for (auto& r : reductions_) reduce(*r);
  }
  double norm = 0;
  if (mode_ == Mode::kReplicated) {
    OpTrace::Scope scope(current_trace(), "opt.adamw");
    norm = clip_gradients(params_, tp_, pp_, opt_.clip_grad_norm, ep_);
    adamw_->step();
    return norm;
  }
  if (mode_ == Mode::kZero) {
    if (zero2_) {  // ZeRO-2 keeps only its gradient chunks (and the unsharded tied copy's)
      for (auto& p : params_) {
        if (!p.pipeline_copy) p.tensor.mutable_grad().reset();
      }
    }
  }
  {
    OpTrace::Scope scope(current_trace(), "opt.adamw");
    norm = clip_chunks(opt_.clip_grad_norm);
    adamw_->step();
  }
  if (mode_ == Mode::kZero && !overlap_param_gather_) gather_zero();
  return norm;
}

void DataParallelOptimizer::finish_gradients() {
  // Megatron's finalize-gradients all-reduces, which the simulator folds into the optimizer node
  // (they are small).
  OpTrace::Scope scope(current_trace(), "opt.adamw");
  if (mode_ == Mode::kFsdp) {
    sum_tp_partial_chunks();
    return;
  }
  all_reduce_sequence_parallel_gradients(params_, tp_);
  sum_tied_embedding();
}

void DataParallelOptimizer::sum_tp_partial_chunks() {
  // SP norms and MoE partial sums: their chunk gradients summed over TP (the chunks line up on
  // every TP rank: the same shapes give the same flat layout).
  if (!tp_) return;
  for (auto& r : reductions_) {
    for (auto& f : r->flats) {
      if (f.tp_summed.empty() || !f.shard.grad().defined()) continue;
      std::vector<torch::Tensor> pieces;
      for (const auto& s : f.tp_summed) pieces.push_back(f.shard.grad().narrow(0, s.start, s.length));
      auto flat = torch::cat(pieces);
      all_reduce_sum(tp_, flat);
      int64_t at = 0;
      for (const auto& s : f.tp_summed) {
        f.shard.mutable_grad().narrow(0, s.start, s.length).copy_(flat.narrow(0, at, s.length));
        at += s.length;
      }
    }
  }
}

void DataParallelOptimizer::sum_tied_embedding() {
  if (embedding_) {  // tied embeddings split over the first and last stage
    const ShardedParam* tied = model_.find("embed.tokens.weight");
    auto grad = tied->tensor.grad();
    all_reduce_sum(embedding_, grad);
    // The last stage's copy is in no bucket (the lowering counts the matrix on the first stage
    // only): its mean over dp here, as the first stage's copy gets in its bucket.
    if (tied->pipeline_copy && dp_) {
      all_reduce_sum(dp_, grad);
      grad.div_(static_cast<double>(dp_->getSize()));
    }
  }
}

void DataParallelOptimizer::reduce(Reduction& r) {
  if (!r.group) {  // one member: only the averaging
    if (mode_ == Mode::kZero) {
      for (auto& f : r.flats) f.shard.mutable_grad() = f.padded_grad(params_).div_(r.divisor);
    } else if (r.divisor > 1) {
      for (const auto& part : r.parts) {
        for (size_t i : part.params) {
          if (params_[i].tensor.grad().defined()) params_[i].tensor.grad().div_(r.divisor);
        }
      }
    }
    return;
  }
  // All in flight before the first wait, as DDP (with overlap, some already are).
  for (size_t k = 0; k < r.buckets.size(); ++k) {
    if (!r.inflight[k]) launch_bucket(r, k);
  }
  for (size_t k = 0; k < r.buckets.size(); ++k) finish_bucket(r, k);
}

void DataParallelOptimizer::launch_bucket(Reduction& r, size_t k) {
  const GradBucket& b = r.buckets[k];
  auto p = std::make_unique<Pending>();
  {
    // Copying the gradients into the bucket's buffer is part of the collective (and not of the
    // backward op during which it may run).
    OpTrace::Scope scope(current_trace(), b.name);
    if (mode_ == Mode::kZero) {
      // Row j of [size, width] goes to rank j: every part's chunk j, parts in the bucket's order.
      const int64_t size = r.group->getSize();
      std::vector<torch::Tensor> columns;
      for (size_t part : b.parts) {
        const Flat& f = r.flats[part];
        columns.push_back(f.padded_grad(params_).view({size, f.chunk}));
      }
      p->inputs = {torch::cat(columns, 1).contiguous()};
      p->outputs = {{torch::empty_like(p->inputs[0])}};
      std::vector<int64_t> equal_splits;
      p->work = r.group->alltoall_base(p->outputs[0][0], p->inputs[0], equal_splits, equal_splits);
    } else {
      std::vector<torch::Tensor> pieces;
      for (size_t part : b.parts) {
        for (size_t i : r.parts[part].params) pieces.push_back(flat_grad(params_[i]));
      }
      p->inputs = {torch::cat(pieces)};
      p->work = r.group->allreduce(p->inputs);
    }
  }
  p->launched = Clock::now();
  p->watch_work();
  r.inflight[k] = std::move(p);
}

void DataParallelOptimizer::finish_bucket(Reduction& r, size_t k) {
  const GradBucket& b = r.buckets[k];
  Pending& p = *r.inflight[k];
  if (mode_ == Mode::kZero) {
    torch::Tensor reduced;
    // The reduce-scatter's own reduction: the size rows received, summed in rank order.
    wait_timed(p, b.name, [&] { reduced = p.outputs[0][0].sum(0).div_(r.divisor); });
    if (OpTrace* t = current_trace()) t->set_algorithm(b.name, kReduceScatterAlgorithm);
    int64_t at = 0;
    for (size_t part : b.parts) {
      Flat& f = r.flats[part];
      f.shard.mutable_grad() = reduced.narrow(0, at, f.chunk).clone();
      at += f.chunk;
    }
  } else {
    // The averaged bucket back into the gradients: the collective's local part, timed with it.
    wait_timed(p, b.name, [&] {
      const torch::Tensor& flat = p.inputs[0];
      flat.div_(r.divisor);
      int64_t at = 0;
      for (size_t part : b.parts) {
        for (size_t i : r.parts[part].params) {
          auto& param = params_[i];
          if (!param.tensor.grad().defined()) param.tensor.mutable_grad() = torch::zeros_like(param.tensor);
          param.tensor.mutable_grad().copy_(flat.narrow(0, at, param.tensor.numel()).view_as(param.tensor));
          at += param.tensor.numel();
        }
      }
    });
  }
  r.inflight[k].reset();
}

void DataParallelOptimizer::gather_zero() {
  launch_zero_gathers();
  finish_zero_gathers("");
}

void DataParallelOptimizer::launch_zero_gathers() {
  // Every part's updated chunks, parts in forward order, dense before experts (the lowering's
  // gather_part), all in flight before the first wait.
  struct Order {
    int64_t order = 0;
    bool experts = false;
    Reduction* r = nullptr;
    size_t part = 0;
  };
  std::vector<Order> order;
  for (auto& r : reductions_) {
    for (size_t i = 0; i < r->parts.size(); ++i) order.push_back({part_order(r->parts[i].name), r->experts, r.get(), i});
  }
  std::stable_sort(order.begin(), order.end(), [](const Order& a, const Order& b) {
    return a.order != b.order ? a.order < b.order : a.experts < b.experts;
  });
  for (const Order& o : order) {
    ZeroGather g;
    g.part = o.r->parts[o.part].name;
    g.name = "opt." + g.part + (o.experts ? ".expert_param_all_gather" : ".param_all_gather");
    g.copy_name = "opt." + g.part + (o.experts ? ".expert_param_copy" : ".param_copy");
    g.reduction = o.r;
    g.index = o.part;
    if (o.r->group) g.pending = launch_gather(o.r->flats[o.part], o.r->group, bf16_);
    zero_gathers_.push_back(std::move(g));
  }
}

void DataParallelOptimizer::finish_zero_gathers(const std::string& part) {
  std::vector<ZeroGather> left;
  for (auto& g : zero_gathers_) {
    if (!part.empty() && g.part != part) {
      left.push_back(std::move(g));
      continue;
    }
    const Flat& f = g.reduction->flats[g.index];
    if (!g.pending) {  // a one-member group: its own chunk is the whole part
      f.scatter_into(params_, compute_copy(f.shard.detach(), bf16_));
      continue;
    }
    wait_timed(*g.pending, g.name);
    if (OpTrace* t = current_trace(); t != nullptr && bf16_) t->set_dtype(g.name, "bf16");
    // The copy-out, the lowering's zero.copy_out: the gathered chunks written into the part's
    // parameters, one read and one write of its bytes (as FSDP's). Megatron gathers into a buffer
    // the parameters are views of and copies nothing; these parameters own their storage.
    OpTrace::Scope scope(current_trace(), g.copy_name);
    for (size_t j = 0; j < f.params.size(); ++j) {
      copy_gathered(*g.pending, f, bf16_, f.offsets[j], params_[f.params[j]].tensor.detach());
    }
  }
  zero_gathers_ = std::move(left);
}

double DataParallelOptimizer::clip_chunks(double max_norm) {
  // Sums of squares per kind (clip_gradients' four sums), each over its reduction's group, whose
  // ranks hold disjoint chunks.
  auto sums = torch::zeros({4}, sum_options());
  for (auto& r : reductions_) {
    auto local = torch::zeros({4}, sum_options());
    for (const auto& f : r->flats) {
      if (!f.shard.grad().defined()) continue;
      for (const auto& s : f.segments) {
        local[s.kind] += f.shard.grad().narrow(0, s.start, s.length).to(torch::kFloat64).pow(2).sum();
      }
    }
    all_reduce_sum(r->group, local);
    sums += local;
  }
  auto split = torch::stack({sums[0], sums[2]});  // TP-split tensors: summed over TP
  all_reduce_sum(tp_, split);
  auto total = (split[0] + sums[1]).reshape({1});
  auto experts = (split[1] + sums[3]).reshape({1});
  all_reduce_sum(ep_, experts);  // routed experts split over EP
  total += experts;
  all_reduce_sum(pp_, total);
  const double norm = std::sqrt(total.item<double>());
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
      for (auto& r : reductions_) {
        for (auto& f : r->flats) {
          if (f.shard.grad().defined()) f.shard.mutable_grad().mul_(coef);
        }
      }
      for (auto& p : params_) {
        if (p.pipeline_copy && p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(coef);
      }
    }
  }
  return norm;
}

torch::TensorOptions DataParallelOptimizer::sum_options() const {
  for (const auto& r : reductions_) {
    if (!r->flats.empty()) return r->flats.front().shard.options().dtype(torch::kFloat64);
  }
  return torch::TensorOptions(torch::kFloat64);
}

void DataParallelOptimizer::gather_parameters() {
  if (mode_ == Mode::kZero && bf16_) {
    // The fp32 masters, not the bf16 copies the model computed with (as Megatron's checkpoints
    // hold the distributed optimizer's fp32 parameters): an fp32 gather outside the steps.
    finish_zero_gathers("");
    for (const auto& r : reductions_) {
      for (const Flat& f : r->flats) {
        if (!r->group) {
          f.scatter_into(params_, f.shard.detach());
          continue;
        }
        const auto p = launch_gather(f, r->group, false);
        p->work->wait();
        f.scatter_into(params_, gathered_flat(*p, f, false));
      }
    }
    return;
  }
  if (overlap_param_gather_) gather_zero();  // the last step's updates were not gathered yet
  if (mode_ != Mode::kFsdp) return;
  const Reduction& r = *reductions_.front();
  for (const Flat& f : r.flats) {
    const auto p = launch_gather(f, r.group, false);  // the fp32 masters
    p->work->wait();
    const auto values = gathered_flat(*p, f, false);
    for (size_t j = 0; j < f.params.size(); ++j) {
      const int64_t n = std::accumulate(f.shapes[j].begin(), f.shapes[j].end(), int64_t{1}, std::multiplies<>());
      params_[f.params[j]].tensor = values.narrow(0, f.offsets[j], n).view(f.shapes[j]).clone();
    }
  }
}

// ---- FSDP ----

void DataParallelOptimizer::before_forward(const std::string& part) {
  if (mode_ == Mode::kZero) {  // overlap_param_gather: this part's parameters, before its first use
    finish_zero_gathers(part);
    return;
  }
  const auto it = fsdp_part_index_.find(part);
  if (it == fsdp_part_index_.end()) return;
  const size_t index = it->second;
  if (index == 0) {  // the stage's first part: a new micro-batch
    auto inst = std::make_unique<Instance>();
    inst->micro_batch = static_cast<int64_t>(instances_.size());
    inst->gathered.resize(fsdp_buckets_.size());
    inst->forward.resize(fsdp_buckets_.size());
    inst->backward.resize(fsdp_buckets_.size());
    instances_.push_back(std::move(inst));
  }
  ORRERY_CHECK(!instances_.empty(), "FSDP: a forward pass began after its first part");
  const size_t bucket = fsdp_bucket_of_part_[index];
  if (fsdp_buckets_[bucket].first != index) return;
  Instance& inst = *instances_.back();
  launch_fsdp_gather(inst, bucket, false);
  for (int64_t k = 1; k <= prefetch_ && bucket + static_cast<size_t>(k) < fsdp_buckets_.size(); ++k) {
    launch_fsdp_gather(inst, bucket + static_cast<size_t>(k), false);
  }
  const Flat& f = reductions_.front()->flats[bucket];
  const int64_t instance = static_cast<int64_t>(instances_.size()) - 1;
  inst.gathered[bucket] = GatherBucket::apply(f.shard, as_handle(this), static_cast<int64_t>(bucket), instance);
  for (size_t j = 0; j < f.params.size(); ++j) params_[f.params[j]].tensor = inst.gathered[bucket][j];
}

torch::Tensor DataParallelOptimizer::after_forward(const std::string& part, const torch::Tensor& output) {
  const auto it = fsdp_part_index_.find(part);
  if (it == fsdp_part_index_.end() || instances_.empty()) return output;
  const size_t bucket = fsdp_bucket_of_part_[it->second];
  if (fsdp_buckets_[bucket].second != it->second || fsdp_resident_[bucket]) return output;
  const int64_t instance = static_cast<int64_t>(instances_.size()) - 1;
  torch::Tensor out = output;
  if (output.requires_grad()) out = PreBackward::apply(output, as_handle(this), static_cast<int64_t>(bucket), instance);
  for (const auto& t : instances_.back()->gathered[bucket]) free_storage(t);
  return out;
}

void DataParallelOptimizer::launch_fsdp_gather(Instance& inst, size_t bucket, bool backward) {
  auto& slot = (backward ? inst.backward : inst.forward)[bucket];
  if (slot || (backward && fsdp_resident_[bucket])) return;
  const Reduction& r = *reductions_.front();
  const Flat& f = r.flats[bucket];
  slot = launch_gather(f, r.group, bf16_);
}

std::string DataParallelOptimizer::fsdp_name(const Instance& inst, size_t bucket, Site site, const char* op) const {
  const auto& [first, last] = fsdp_buckets_[bucket];
  return fsdp_node_name(fsdp_parts_[site == Site::kBackwardGather ? last : first], inst.micro_batch,
                        site == Site::kForward ? "fwd" : "bwd", op);
}

std::unique_ptr<DataParallelOptimizer::Pending> DataParallelOptimizer::finish_fsdp_gather(Instance& inst, size_t bucket,
                                                                                          bool backward) {
  launch_fsdp_gather(inst, bucket, backward);
  auto& slot = (backward ? inst.backward : inst.forward)[bucket];
  const std::string name =
      fsdp_name(inst, bucket, backward ? Site::kBackwardGather : Site::kForward, "fsdp.all_gather");
  wait_timed(*slot, name);
  if (OpTrace* t = current_trace(); t != nullptr && bf16_) t->set_dtype(name, "bf16");
  return std::move(slot);
}

std::vector<torch::Tensor> DataParallelOptimizer::fsdp_forward_gather(int64_t bucket, int64_t instance) {
  Instance& inst = *instances_[static_cast<size_t>(instance)];
  const size_t b = static_cast<size_t>(bucket);
  const Flat& f = reductions_.front()->flats[b];
  const auto done = finish_fsdp_gather(inst, b, false);
  // The copy-out: the gathered chunks copied into the parameters' own tensors.
  OpTrace::Scope scope(current_trace(), fsdp_name(inst, b, Site::kForward, "fsdp.copy_out"));
  std::vector<torch::Tensor> out;
  for (size_t j = 0; j < f.params.size(); ++j) {
    out.push_back(torch::empty(f.shapes[j], f.shard.options()));
    copy_gathered(*done, f, bf16_, f.offsets[j], out.back());
  }
  return out;
}

void DataParallelOptimizer::fsdp_backward_gather(int64_t bucket, int64_t instance) {
  Instance& inst = *instances_[static_cast<size_t>(instance)];
  const size_t b = static_cast<size_t>(bucket);
  launch_fsdp_gather(inst, b, true);
  // Prefetch: the buckets the backward pass reaches next (lower indices).
  for (int64_t k = 1; k <= prefetch_ && static_cast<int64_t>(b) - k >= 0; ++k) {
    launch_fsdp_gather(inst, b - static_cast<size_t>(k), true);
  }
  const Flat& f = reductions_.front()->flats[b];
  const auto done = finish_fsdp_gather(inst, b, true);
  // The copy-out, into the storages the forward's tensors (saved for backward) still point to.
  OpTrace::Scope scope(current_trace(), fsdp_name(inst, b, Site::kBackwardGather, "fsdp.copy_out"));
  for (size_t j = 0; j < f.params.size(); ++j) {
    const auto& t = inst.gathered[b][j];
    copy_gathered(*done, f, bf16_, f.offsets[j], refill_storage(t));
  }
}

torch::Tensor DataParallelOptimizer::fsdp_reduce_scatter(int64_t bucket, int64_t instance,
                                                         const std::vector<torch::Tensor>& grads) {
  Instance& inst = *instances_[static_cast<size_t>(instance)];
  const size_t b = static_cast<size_t>(bucket);
  const Reduction& r = *reductions_.front();
  const Flat& f = r.flats[b];
  // One reduce-scatter in flight, as FSDP2 keeps it: the previous one finishes (into its shard's
  // gradient) before this one's copy-in, which bounds the buffers to one bucket's.
  finish_fsdp_reduce();
  auto rs = std::make_unique<FsdpReduce>();
  rs->bucket = b;
  rs->name = fsdp_name(inst, b, Site::kReduction, "fsdp.reduce_scatter");
  torch::Tensor input;
  {
    // The copy-in: the bucket's gradients packed into one flat vector, padded to the chunks.
    OpTrace::Scope scope(current_trace(), fsdp_name(inst, b, Site::kReduction, "fsdp.copy_in"));
    std::vector<torch::Tensor> pieces;
    for (size_t j = 0; j < f.params.size(); ++j) {
      const auto& t = inst.gathered[b][j];
      pieces.push_back(j < grads.size() && grads[j].defined() ? grads[j].reshape(-1)
                                                              : torch::zeros({t.numel()}, t.options()));
    }
    if (f.chunk * f.size > f.numel) pieces.push_back(torch::zeros({f.chunk * f.size - f.numel}, f.shard.options()));
    input = torch::cat(pieces);
    // The gathered copy is no longer needed: every use of it has run its backward.
    for (const auto& t : inst.gathered[b]) free_storage(t);
  }
  // Reduce-scatter as alltoall_base + local sum (Gloo 1.13 has no reduce-scatter), launched and
  // left in flight beside the next layers' backward, as the lowering has it on its own stream.
  Pending& p = rs->pending;
  p.inputs = {input};
  p.outputs = {{torch::empty_like(input)}};
  std::vector<int64_t> equal_splits;
  p.launched = Clock::now();
  p.work = r.group->alltoall_base(p.outputs[0][0], p.inputs[0], equal_splits, equal_splits);
  p.watch_work();
  if (OpTrace* t = current_trace()) t->set_algorithm(rs->name, kReduceScatterAlgorithm);
  fsdp_reduce_ = std::move(rs);
  // The shard's gradient comes from finish_fsdp_reduce, not through autograd.
  return torch::Tensor();
}

void DataParallelOptimizer::finish_fsdp_reduce() {
  if (!fsdp_reduce_) return;
  FsdpReduce& rs = *fsdp_reduce_;
  Reduction& r = *reductions_.front();
  Flat& f = r.flats[rs.bucket];
  // The reduce-scatter's own reduction: the size rows received, summed in rank order, averaged,
  // and accumulated into the shard's gradient (over the step's micro-batches).
  wait_timed(rs.pending, rs.name, [&] {
    auto reduced = rs.pending.outputs[0][0].view({f.size, f.chunk}).sum(0).div_(r.divisor);
    if (f.shard.grad().defined()) f.shard.mutable_grad().add_(reduced);
    else f.shard.mutable_grad() = reduced;
  });
  fsdp_reduce_.reset();
}

// ---- Layout query (data_parallel.hpp) ----

std::vector<DataParallelCollective> data_parallel_collectives(const TrainConfig& c, int64_t rank) {
  const plan::RankLayout grid = plan::layout_of(c.plan);
  const plan::RankCoord coord = grid.coord(rank);
  const auto split = layers_per_stage(c.plan, c.model);
  StageLayers stage;
  for (int64_t i = 0; i < coord.pp; ++i) stage.first_layer += split[static_cast<size_t>(i)];
  stage.end_layer = stage.first_layer + split[static_cast<size_t>(coord.pp)];
  stage.first = coord.pp == 0;
  stage.last = coord.pp == grid.degrees().pp - 1;
  ExpertParallel ep;
  ep.size = grid.degrees().ep;
  const auto ep_members = grid.group(plan::GroupKind::kEp, rank);
  ep.rank = std::find(ep_members.begin(), ep_members.end(), rank) - ep_members.begin();
  const Transformer model(c.model, GroupPtr(), grid.degrees().tp, coord.tp, c.seed, stage,
                          c.plan.parallel().sequence_parallel(), ep);
  // Without an EP group the model keeps every routed expert: keep this EP rank's.
  std::set<std::string> foreign;
  for (const auto& m : model.all_parameters()) {
    if (m.expert >= 0 && ep.size > 1 && expert_owner(c.model, ep.size, m.expert) != ep.rank) foreign.insert(m.name);
  }
  std::vector<ShardedParam> params;
  for (const auto& p : model.parameters()) {
    if (foreign.count(p.name) == 0) params.push_back(p);
  }
  const auto sharding = c.plan.sharding();
  const int64_t dp = grid.degrees().dp;
  std::vector<DataParallelCollective> out;
  auto collective = [](const std::string& name, const std::vector<const ModelPart*>& parts) {
    DataParallelCollective d;
    d.name = name;
    for (const ModelPart* p : parts) {
      d.parts.push_back(p->name);
      d.params += p->numel;
    }
    return d;
  };
  if (sharding == pb::SHARDING_ZERO3 || sharding == pb::SHARDING_FSDP) {
    if (dp < 2) return out;
    const auto parts = parts_of(params, [](const ShardedParam&) { return true; });
    std::vector<double> sizes;
    for (const auto& p : parts) sizes.push_back(p.numel);
    const double limit =
        c.plan.bucket_bytes() > 0 ? c.plan.bucket_bytes() / parameter_bytes(c.plan.job().precision()) : 0;
    for (const auto& run : plan::gradient_buckets(sizes, limit)) {
      std::vector<const ModelPart*> members;
      for (size_t i : run) members.push_back(&parts[i]);
      out.push_back(collective(fsdp_node_name(parts[run.front()], 0, "fwd", "fsdp.all_gather"), members));
    }
    return out;
  }
  const bool zero = sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2;
  const double bucket_params = plan::gradient_bucket_params(c.plan, dp, plan::precisions_of(c.plan.job().precision()).grad_bytes);
  const int64_t edp = static_cast<int64_t>(grid.group(plan::GroupKind::kEdp, rank).size());
  std::vector<std::pair<bool, std::vector<ModelPart>>> subsets;
  for (const bool experts : {false, true}) {
    if ((experts ? edp : dp) < 2) continue;
    auto parts = model_parts(params, experts);
    for (const auto& b : gradient_buckets(parts, bucket_params, experts ? "edp" : "dp", zero)) {
      std::vector<const ModelPart*> members;
      for (size_t i : b.parts) members.push_back(&parts[i]);
      out.push_back(collective(b.name, members));
    }
    subsets.emplace_back(experts, std::move(parts));
  }
  if (!zero) return out;
  std::vector<std::pair<std::pair<int64_t, bool>, DataParallelCollective>> gathers;
  for (const auto& [experts, parts] : subsets) {
    for (const auto& p : parts) {
      const std::string name = "opt." + p.name + (experts ? ".expert_param_all_gather" : ".param_all_gather");
      gathers.push_back({{part_order(p.name), experts}, collective(name, {&p})});
    }
  }
  std::stable_sort(gathers.begin(), gathers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& g : gathers) out.push_back(std::move(g.second));
  return out;
}

}  // namespace orrery::executor
