#include "sharding_reduction.hpp"

#include "op_trace.hpp"
#include "orrery/plan/buckets.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "sharding_strategy.hpp"

namespace orrery::executor {

BucketReduction::BucketReduction(Transformer& model, const RankGroups& groups, const TrainConfig& c,
                                 int64_t ep_size, bool sharded)
    : model_(model),
      params_(model.mutable_parameters()),
      tp_(groups.tp),
      embedding_(groups.embedding),
      dp_(groups.dp),
      sharded_(sharded) {
  drop_grads_ = c.plan.sharding() == pb::SHARDING_ZERO2;
  bf16_grads_ = c.plan.grad_reduce_dtype() == pb::GRAD_REDUCE_DTYPE_BF16;
  overlap_grad_ = c.plan.overlap_grad_reduce();
  // The dp group reduces over dp x cp ranks under CP (process_group.hpp); the micro-batches are
  // split over dp only.
  const int64_t dp = plan::degrees_of(c.plan.parallel()).dp;
  last_micro_batch_ = c.plan.job().global_batch_size() / (dp * c.plan.micro_batch_size()) - 1;
  const double bucket_params = plan::gradient_bucket_params(
      c.plan, dp, plan::precisions_of(c.plan.job().precision()).grad_bytes);
  add_reduction(groups, false, static_cast<double>(group_size(groups.dp)), bucket_params);
  // Routed experts: averaged over the expert-data-parallel group, then by ep (model_moe.hpp).
  add_reduction(groups, true, static_cast<double>(group_size(groups.edp) * ep_size), bucket_params);
  // The last stage's copy of a tied embedding: full, never sharded.
  for (const auto& p : params_) {
    if (p.pipeline_copy) optimized_.push_back(p.tensor);
  }
  if (overlap_grad_) watch_gradients(groups.embedding);
}

void BucketReduction::add_reduction(const RankGroups& groups, bool experts, double divisor,
                                    double bucket_params) {
  auto r = std::make_unique<Reduction>();
  r->experts = experts;
  r->group = experts ? groups.edp : groups.dp;
  r->divisor = divisor;
  r->group_name = experts ? "edp" : "dp";
  r->parts = model_parts(params_, experts);
  if (r->parts.empty()) return;
  r->buckets = gradient_buckets(r->parts, bucket_params, r->group_name, sharded_);
  r->inflight.resize(r->buckets.size());
  for (const ModelPart& part : r->parts) {
    if (!sharded_) {
      for (size_t i : part.params) optimized_.push_back(params_[i].tensor);
      continue;
    }
    r->flats.push_back(make_flat(params_, part.params, group_size(r->group), group_rank(r->group),
                                 groups.ep != nullptr));
    optimized_.push_back(r->flats.back().shard);
  }
  reductions_.push_back(std::move(r));
}

void BucketReduction::watch_gradients(const GroupPtr& embedding) {
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
      deferred.push_back(embed && embedding != nullptr);
    }
    Reduction* raw = r.get();
    r->readiness = std::make_unique<BucketReadiness>(
        members, deferred, [this] { return current_micro_batch() == last_micro_batch_; },
        [this, raw](size_t k) { launch_bucket(*raw, k); });
  }
}

std::vector<FlatGroup*> BucketReduction::flat_groups() const {
  std::vector<FlatGroup*> out;
  for (const auto& r : reductions_) out.push_back(r.get());
  return out;
}

void BucketReduction::zero_grad() {
  for (auto& p : params_) {
    if (!p.tensor.grad().defined()) continue;
    if (drop_grads_) {
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
}

void BucketReduction::reduce_gradients() {
  if (!overlap_grad_) {
    {
      // Megatron's finalize-gradients all-reduces, which the simulator folds into the optimizer
      // node (they are small).
      OpTrace::Scope scope(current_trace(), "opt.adamw");
      all_reduce_sequence_parallel_gradients(params_, tp_);
      sum_tied_embedding();
    }
    for (auto& r : reductions_) reduce(*r);
    return;
  }
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
  if (sharded_) {
    sum_tp_partial_chunks(flat_groups(), tp_);
  } else {
    all_reduce_sequence_parallel_gradients(params_, tp_);
  }
}

void BucketReduction::sum_tied_embedding() {
  if (!embedding_) return;  // tied embeddings split over the first and last stage
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

void BucketReduction::reduce(Reduction& r) {
  if (!r.group) {  // one member: only the averaging
    if (sharded_) {
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

void BucketReduction::launch_bucket(Reduction& r, size_t k) {
  const GradBucket& b = r.buckets[k];
  auto p = std::make_unique<Pending>();
  {
    // Copying the gradients into the bucket's buffer is part of the collective (and not of the
    // backward op during which it may run).
    OpTrace::Scope scope(current_trace(), b.name);
    if (sharded_) {
      launch_reduce_scatter(r, b, *p);
    } else {
      launch_all_reduce(r, b, *p);
    }
  }
  p->launched = Clock::now();
  p->watch_work();
  r.inflight[k] = std::move(p);
}

void BucketReduction::launch_reduce_scatter(Reduction& r, const GradBucket& b, Pending& p) {
  // Row j of [size, width] goes to rank j: every part's chunk j, parts in the bucket's order.
  const int64_t size = r.group->getSize();
  std::vector<torch::Tensor> columns;
  for (size_t part : b.parts) {
    const Flat& f = r.flats[part];
    columns.push_back(f.padded_grad(params_).view({size, f.chunk}));
  }
  start_reduce_scatter(p, r.group, torch::cat(columns, 1).contiguous(), bf16_grads_);
}

void BucketReduction::launch_all_reduce(Reduction& r, const GradBucket& b, Pending& p) {
  std::vector<torch::Tensor> pieces;
  for (size_t part : b.parts) {
    for (size_t i : r.parts[part].params) pieces.push_back(flat_grad(params_[i]));
  }
  start_all_reduce(p, r.group, torch::cat(pieces), bf16_grads_);
}

void BucketReduction::finish_bucket(Reduction& r, size_t k) {
  const GradBucket& b = r.buckets[k];
  Pending& p = *r.inflight[k];
  if (sharded_) {
    torch::Tensor reduced;
    // The reduce-scatter's own reduction: the size rows received, summed in rank order.
    wait_timed(p, b.name, [&] { reduced = received_rows(p).sum(0).div_(r.divisor); });
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
      const torch::Tensor flat = all_reduced(p, r.group, b.numel, bf16_grads_);
      flat.div_(r.divisor);
      int64_t at = 0;
      for (size_t part : b.parts) {
        for (size_t i : r.parts[part].params) {
          auto& param = params_[i];
          if (!param.tensor.grad().defined())
            param.tensor.mutable_grad() = torch::zeros_like(param.tensor);
          param.tensor.mutable_grad().copy_(
              flat.narrow(0, at, param.tensor.numel()).view_as(param.tensor));
          at += param.tensor.numel();
        }
      }
    });
  }
  if (OpTrace* t = current_trace(); t != nullptr && bf16_grads_) {
    t->set_dtype(b.name, "bf16");
    if (!sharded_) t->set_algorithm(b.name, kBf16AllReduceAlgorithm);
  }
  r.inflight[k].reset();
}

// ---- sharding none: AdamW on the full tensors ----

namespace {

class ReplicatedStrategy final : public ShardingStrategy {
 public:
  ReplicatedStrategy(Transformer& model, const RankGroups& groups, const TrainConfig& c,
                     int64_t ep_size)
      : params_(model.mutable_parameters()),
        tp_(groups.tp),
        pp_(groups.pp),
        ep_(groups.ep),
        buckets_(model, groups, c, ep_size, false) {}

  std::vector<torch::Tensor> optimized() const override { return buckets_.optimized(); }
  bool uses_part_hooks() const override { return false; }
  void zero_grad() override { buckets_.zero_grad(); }
  void reduce_gradients() override { buckets_.reduce_gradients(); }
  double clip(double max_norm) override { return clip_gradients(params_, tp_, pp_, max_norm, ep_); }
  void gather_parameters() override {}  // the model holds them whole

 private:
  std::vector<ShardedParam>& params_;
  GroupPtr tp_, pp_, ep_;
  BucketReduction buckets_;
};

}  // namespace

std::unique_ptr<ShardingStrategy> make_replicated_strategy(Transformer& model,
                                                           const RankGroups& groups,
                                                           const TrainConfig& config,
                                                           int64_t ep_size) {
  return std::make_unique<ReplicatedStrategy>(model, groups, config, ep_size);
}

}  // namespace orrery::executor
