// ZeRO-1/2 (Megatron's distributed optimizer): gradient buckets reduce-scattered into each part's
// flat chunk (sharding_reduction.hpp), AdamW on this rank's chunks only (elementwise, so the same
// numbers as on the full tensors), then every part's updated chunks all-gathered and copied out
// into its parameters, after the step or (overlap_param_gather) during the next step's forward.
#include <algorithm>

#include "op_trace.hpp"
#include "sharding_reduction.hpp"
#include "sharding_strategy.hpp"

namespace orrery::executor {

namespace {

// One part's parameter gather, launched and not waited for yet.
struct ZeroGather {
  std::string part, name, copy_name;  // the gather's node and its copy-out's
  const Reduction* reduction = nullptr;
  size_t index = 0;                  // into reduction->parts and ->flats
  std::unique_ptr<Pending> pending;  // null: a one-member group, nothing to gather
};

class ZeroStrategy final : public ShardingStrategy {
 public:
  ZeroStrategy(Transformer& model, const RankGroups& groups, const TrainConfig& c, int64_t ep_size);

  std::vector<torch::Tensor> optimized() const override { return buckets_.optimized(); }
  bool uses_part_hooks() const override { return overlap_param_gather_; }
  void zero_grad() override;
  void reduce_gradients() override;
  double clip(double max_norm) override {
    return clip_chunks(buckets_.flat_groups(), params_, tp_, pp_, ep_, max_norm);
  }
  void after_update() override {
    if (!overlap_param_gather_) gather();
  }
  void gather_parameters() override;
  // overlap_param_gather: this part's parameters, before their first use.
  void before_forward(const std::string& part) override { finish_gathers(part); }

 private:
  void gather() {  // every part's updated chunks gathered and copied out
    launch_gathers();
    finish_gathers("");
  }
  void launch_gathers();                         // ... launched, parts in forward order
  void finish_gathers(const std::string& part);  // waits for `part`'s ("": all of them)
  void gather_masters();

  std::vector<ShardedParam>& params_;
  GroupPtr tp_, pp_, ep_;
  bool zero2_ = false;
  bool bf16_ = false;                  // parameters gathered and computed with as bf16 copies
  bool overlap_param_gather_ = false;  // gathers launched at the step's start
  BucketReduction buckets_;
  std::vector<ZeroGather> gathers_;  // launched, not waited for yet
};

ZeroStrategy::ZeroStrategy(Transformer& model, const RankGroups& groups, const TrainConfig& c,
                           int64_t ep_size)
    : params_(model.mutable_parameters()),
      tp_(groups.tp),
      pp_(groups.pp),
      ep_(groups.ep),
      buckets_(model, groups, c, ep_size, true) {
  zero2_ = c.plan.sharding() == pb::SHARDING_ZERO2;
  bf16_ = c.plan.job().precision() == pb::PRECISION_BF16;
  overlap_param_gather_ = c.plan.overlap_param_gather();
  if (!bf16_) return;
  // The first step computes with the bf16 copies too, as every later one does.
  for (const auto& r : buckets_.reductions()) {
    for (const Flat& f : r->flats) {
      for (size_t i : f.params) {
        params_[i].tensor.detach().copy_(compute_copy(params_[i].tensor.detach(), true));
      }
    }
  }
}

void ZeroStrategy::zero_grad() {
  buckets_.zero_grad();
  // The previous step's updated chunks (the initial ones in step 1: the same values) travel while
  // the forward passes run; each part waits for its own (before_forward).
  if (overlap_param_gather_) launch_gathers();
}

void ZeroStrategy::reduce_gradients() {
  finish_gathers("");  // every part ran forward; none should be left, but AdamW must not race one
  buckets_.reduce_gradients();
  if (!zero2_) return;
  // ZeRO-2 keeps only its gradient chunks (and the unsharded tied copy's); ZeRO-1 keeps the full
  // gradients to the next step (the executor reduces after backward, so the two differ in memory
  // after backward only).
  for (auto& p : params_) {
    if (!p.pipeline_copy) p.tensor.mutable_grad().reset();
  }
}

void ZeroStrategy::launch_gathers() {
  // Every part's updated chunks, parts in forward order, dense before experts (the lowering's
  // gather_part), all in flight before the first wait.
  struct Order {
    int64_t order = 0;
    bool experts = false;
    const Reduction* r = nullptr;
    size_t part = 0;
  };
  std::vector<Order> order;
  for (const auto& r : buckets_.reductions()) {
    for (size_t i = 0; i < r->parts.size(); ++i) {
      order.push_back({part_order(r->parts[i].name), r->experts, r.get(), i});
    }
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
    gathers_.push_back(std::move(g));
  }
}

void ZeroStrategy::finish_gathers(const std::string& part) {
  std::vector<ZeroGather> left;
  for (auto& g : gathers_) {
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
  gathers_ = std::move(left);
}

void ZeroStrategy::gather_parameters() {
  if (bf16_) {
    gather_masters();
    return;
  }
  if (overlap_param_gather_) gather();  // the last step's updates were not gathered yet
}

void ZeroStrategy::gather_masters() {
  // The fp32 masters, not the bf16 copies the model computed with (as Megatron's checkpoints
  // hold the distributed optimizer's fp32 parameters): an fp32 gather outside the steps.
  finish_gathers("");
  for (const auto& r : buckets_.reductions()) {
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
}

}  // namespace

std::unique_ptr<ShardingStrategy> make_zero_strategy(Transformer& model, const RankGroups& groups,
                                                     const TrainConfig& config, int64_t ep_size) {
  return std::make_unique<ZeroStrategy>(model, groups, config, ep_size);
}

}  // namespace orrery::executor
