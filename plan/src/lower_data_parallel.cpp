// Data parallelism at the end of (and around) a step:
//   none (DDP):      gradient all-reduce per bucket, overlapped with backward when
//                    overlap_grad_reduce (buckets launch as their last gradient is final).
//   zero1 / zero2:   Megatron's distributed optimizer: reduce-scatter per bucket, the optimizer on
//                    this rank's 1/dp shard, then an all-gather of the updated parameters (at the
//                    start of the next step, waited for by each layer's first forward, when
//                    overlap_param_gather).
//   zero3 / fsdp:    parameters all-gathered before each bucket's forward and backward (the next
//                    prefetch_buckets buckets of the pass issued with it), gradients
//                    reduce-scattered after each bucket's backward, every micro-batch (PyTorch
//                    FSDP's default); FSDP2's copy-out after each gather and copy-in before each
//                    reduce-scatter run on the compute stream.
//   hsdp:            fsdp inside shard groups, plus an all-reduce of the gradient shards across
//                    replicas once per step.
// Expert weights are reduced over the expert-data-parallel group instead of dp.
#include <algorithm>
#include <functional>

#include "lower_rank.hpp"
#include "orrery/plan/buckets.hpp"
#include "orrery/plan/fp8.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/op_tables.hpp"

namespace orrery::plan::detail {
namespace {

// The name of an FSDP collective of part `key`: "fsdp.all_gather" in a layer (whose site name
// carries "L<i>."), "embed.fsdp.all_gather" / "head.fsdp.all_gather" for the two parts that share
// layer -1.
std::string fsdp_op_name(int64_t key, const char* what) {
  return std::string(key == -1 ? "embed." : key == -2 ? "head." : "") + what;
}

}  // namespace

int64_t RankLowering::issue_fsdp_gather(const FsdpBucket& b, bool forward, const Site& at,
                                        int64_t gate) {
  const auto key = std::make_tuple(forward, at.micro_batch, b.chunk, b.index);
  if (auto it = fsdp_gathers_.find(key); it != fsdp_gathers_.end()) return it->second;
  // Named at the part where the bucket is gathered: its first in forward, its last in backward,
  // in that part's phase (the recompute, for a decoder layer under full recomputation).
  const int64_t part = forward ? b.first : b.last;
  Site s = at;
  s.layer = part >= 0 ? part : -1;
  s.phase = forward                                     ? pb::PHASE_FORWARD
            : part >= 0 && plan_.recomputes_layer(part) ? pb::PHASE_RECOMPUTE
                                                        : pb::PHASE_BACKWARD;
  const int64_t id =
      b_.collective(s, kCommDp, fsdp_op_name(part, "fsdp.all_gather"),
                    pb::COLLECTIVE_KIND_ALL_GATHER, fsdp_group_, b.gather_bytes, {gate});
  fsdp_gathers_[key] = id;
  return id;
}

int64_t RankLowering::fsdp_gather(const Site& site, const FsdpBucket& bucket, int64_t input) {
  if (fsdp_group_ < 0 || bucket.params <= 0) return input;
  const bool forward = site.phase == pb::PHASE_FORWARD;
  const int64_t gathered = issue_fsdp_gather(bucket, forward, site, input);
  // Prefetch: the next buckets this pass reaches (forward: later ones; backward: earlier ones),
  // launched now, behind this one on the stream and ahead of this bucket's reduce-scatter.
  const auto& chunk = fsdp_chunks_[static_cast<size_t>(bucket.chunk)];
  for (int64_t k = 1; k <= plan_.plan.prefetch_buckets(); ++k) {
    const int64_t next = static_cast<int64_t>(bucket.index) + (forward ? k : -k);
    if (next < 0 || next >= static_cast<int64_t>(chunk.size())) break;
    const FsdpBucket& b = chunk[static_cast<size_t>(next)];
    if (!forward && b.resident) continue;
    issue_fsdp_gather(b, forward, site, input);
  }
  // The copy-out: the gathered buffer split into the parameters the part computes with.
  const int64_t key = forward ? bucket.first : bucket.last;
  return b_.copy(site, fsdp_op_name(key, "fsdp.copy_out"), "fsdp.copy_out",
                 fsdp_copy(bucket.params, bucket.gather_bytes / bucket.params), {gathered, input});
}

RankLowering::PartGather RankLowering::gather_part(const std::string& name,
                                                   const std::vector<models::LayerOp>& ops,
                                                   std::vector<int64_t> deps) {
  // A part's updated weights, dense ones over the gradient group and expert ones over the
  // expert-data-parallel group (the groups their shards were reduced over).
  const Site site{pb::PHASE_OPTIMIZER, -1, -1, -1};
  PartGather g{name};
  for (const auto& op : ops) (is_expert_op(op) ? g.expert_params : g.dense_params) += op.parameters;
  if (g.dense_params > 0 && grad_group_ >= 0) {
    g.dense =
        b_.collective(site, kCommDp, name + ".param_all_gather", pb::COLLECTIVE_KIND_ALL_GATHER,
                      grad_group_, param_gather_bytes(plan_.precision, ops, false), deps);
  }
  if (g.expert_params > 0 && expert_grad_group_ >= 0) {
    g.expert = b_.collective(site, kCommDp, name + ".expert_param_all_gather",
                             pb::COLLECTIVE_KIND_ALL_GATHER, expert_grad_group_,
                             param_gather_bytes(plan_.precision, ops, true), deps);
  }
  return g;
}

int64_t RankLowering::copy_part(const PartGather& g, int64_t after) {
  const Site site{pb::PHASE_OPTIMIZER, -1, -1, -1};
  int64_t last = -1;
  if (g.dense >= 0) {
    last = b_.copy(site, g.name + ".param_copy", "zero.copy_out",
                   fsdp_copy(g.dense_params, plan_.precision.param_bytes), {g.dense, after});
  }
  if (g.expert >= 0) {
    last = b_.copy(site, g.name + ".expert_param_copy", "zero.copy_out",
                   fsdp_copy(g.expert_params, plan_.precision.param_bytes), {g.expert, after});
  }
  return last;
}

void RankLowering::for_each_part(
    const std::function<void(int64_t, const std::string&, const std::vector<models::LayerOp>&)>&
        f) {
  for (int64_t chunk = 0; chunk < plan_.degrees.vp; ++chunk) {
    const int64_t s = stage_of(chunk);
    if (s == 0) f(-1, "embed", ops_.embedding);
    const int64_t first = plan_.first_layer(s);
    for (int64_t l = first; l < first + plan_.layers_per_stage[static_cast<size_t>(s)]; ++l) {
      f(l, "L" + std::to_string(l), ops_.layer(plan_.model, l));
    }
    if (s == stages_ - 1) f(-2, "head", ops_.head);
  }
}

int64_t RankLowering::part_key(const std::vector<models::LayerOp>& ops, const Site& site) const {
  if (&ops == &ops_.embedding) return -1;
  if (&ops == &ops_.head) return -2;
  return site.layer;
}

void RankLowering::plan_fsdp_buckets() {
  const double limit =
      plan_.plan.bucket_bytes() > 0 ? plan_.plan.bucket_bytes() / plan_.precision.param_bytes : 0;
  const bool tied_single_stage = plan_.model.tied_embeddings() && stages_ == 1;
  for (int64_t chunk = 0; chunk < plan_.degrees.vp; ++chunk) {
    std::vector<int64_t> keys;  // units in forward order
    std::vector<double> params, bytes;
    const int64_t s = stage_of(chunk);
    auto add = [&](int64_t key, const std::vector<models::LayerOp>& ops) {
      double p = 0;
      for (const auto& op : ops) p += op.parameters;
      if (p <= 0) return;
      keys.push_back(key), params.push_back(p);
      bytes.push_back(param_gather_bytes(plan_.precision, ops, false) +
                      param_gather_bytes(plan_.precision, ops, true));
    };
    if (s == 0) add(-1, ops_.embedding);
    const int64_t first = plan_.first_layer(s);
    for (int64_t l = first; l < first + plan_.layers_per_stage[static_cast<size_t>(s)]; ++l) {
      add(l, ops_.layer(plan_.model, l));
    }
    if (s == stages_ - 1) add(-2, ops_.head);
    fsdp_chunks_.emplace_back();
    for (const FsdpBucketSpan& span : fsdp_buckets(keys, params, limit, tied_single_stage)) {
      double gather_bytes = 0;
      for (size_t j = span.first; j <= span.last; ++j) gather_bytes += bytes[j];
      const FsdpBucket b{span.params,     gather_bytes, keys[span.first],
                         keys[span.last], chunk,        fsdp_chunks_.back().size(),
                         span.resident};
      for (size_t j = span.first; j <= span.last; ++j) fsdp_bucket_of_[keys[j]] = b;
      fsdp_chunks_.back().push_back(b);
    }
  }
}

void RankLowering::start_step() {
  if (fsdp()) plan_fsdp_buckets();
  const auto sharding = plan_.sharding();
  const bool distributed_optimizer =
      sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2;
  if (!distributed_optimizer || !plan_.plan.overlap_param_gather()) return;
  // The previous step's updated shards, gathered part by part in forward order while the
  // forward passes run (Megatron's --overlap-param-gather).
  for_each_part([&](int64_t key, const std::string& name, const std::vector<models::LayerOp>& ops) {
    const PartGather g = gather_part(name, ops, {});
    if (g.dense >= 0 || g.expert >= 0) param_gather_[key] = g;
  });
}

void RankLowering::fsdp_reduce(const Site& site, int64_t key, double params, int64_t input) {
  if (fsdp_group_ < 0 || params <= 0) return;
  // The copy-in packs the gradients into the reduce-scatter's buffer once the previous
  // reduce-scatter has finished with its own (FSDP2 keeps one in flight: the compute stream
  // waits for it, which bounds the buffers to one bucket's).
  const int64_t previous = fsdp_reduces_.empty() ? -1 : fsdp_reduces_.back();
  const int64_t packed =
      b_.copy(site, fsdp_op_name(key, "fsdp.copy_in"), "fsdp.copy_in",
              fsdp_copy(params, plan_.precision.grad_reduce_bytes), {input, previous});
  fsdp_reduces_.push_back(b_.collective(site, kCommDp, fsdp_op_name(key, "fsdp.reduce_scatter"),
                                        pb::COLLECTIVE_KIND_REDUCE_SCATTER, fsdp_group_,
                                        params * plan_.precision.grad_reduce_bytes, {packed}));
}

void RankLowering::record_grads(const std::string& name, const std::vector<models::LayerOp>& ops,
                                int64_t ready) {
  GradReady g{name, ready, 0, 0};
  for (const auto& op : ops) (is_expert_op(op) ? g.expert_params : g.dense_params) += op.parameters;
  if (g.dense_params + g.expert_params > 0) grads_.push_back(g);
}

void RankLowering::finish_step() {
  const auto sharding = plan_.sharding();
  const auto& prec = plan_.precision;
  const bool overlap = plan_.plan.overlap_grad_reduce();
  const bool distributed_optimizer =
      sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2;
  const Site site{pb::PHASE_OPTIMIZER, -1, -1, -1};
  std::vector<int64_t> reduced;  // the optimizer waits for these
  double params = 0, expert_params = 0;
  for (const auto& g : grads_) params += g.dense_params, expert_params += g.expert_params;

  if (fsdp()) {
    // Gradients were reduce-scattered layer by layer (AdamW needs the last one); HSDP adds one
    // all-reduce of the shard.
    if (!fsdp_reduces_.empty()) reduced.push_back(fsdp_reduces_.back());
    if (replica_group_ >= 0) {
      const double shard =
          (params + expert_params) / static_cast<double>(plan_.dense_shard_degree());
      reduced.push_back(b_.collective(site, kCommDp, "hsdp.replica_all_reduce",
                                      pb::COLLECTIVE_KIND_ALL_REDUCE, replica_group_,
                                      shard * prec.grad_reduce_bytes, {last_backward_}));
    }
  } else {
    const double bucket_params =
        gradient_bucket_params(plan_.plan, plan_.degrees.dp, prec.grad_bytes);
    const auto kind =
        distributed_optimizer ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE;
    const char* verb = distributed_optimizer ? "reduce_scatter" : "all_reduce";
    // Dense and expert weights fill separate buckets (they reduce over different groups).
    for (const bool expert : {false, true}) {
      const int64_t group = expert ? expert_grad_group_ : grad_group_;
      if (group < 0) continue;
      std::vector<double> unit_params;
      for (const auto& g : grads_) unit_params.push_back(expert ? g.expert_params : g.dense_params);
      int64_t bucket = 0;
      int64_t ready = -1;  // the latest gradient ready so far: a bucket waits for those before it
      for (const auto& units : gradient_buckets(unit_params, bucket_params)) {
        double filled = 0;
        for (size_t u : units) {
          filled += unit_params[u];
          ready = std::max(ready, grads_[u].ready);
        }
        const int64_t after = overlap ? ready : last_backward_;
        reduced.push_back(b_.collective(
            site, kCommDp,
            std::string(expert ? "edp" : "dp") + ".bucket" + std::to_string(bucket++) + "." + verb,
            kind, group, filled * prec.grad_reduce_bytes, {after}));
      }
    }
  }

  // AdamW on this rank's parameters (its shard when sharded: ResolvedPlan::*_shard_degree).
  const double shard = params / static_cast<double>(plan_.dense_shard_degree()) +
                       expert_params / static_cast<double>(plan_.expert_shard_degree());
  // Read: master weight, gradient, two moments; write: master, moments, the compute copy.
  const double read = prec.master_param_bytes + prec.grad_bytes + prec.optimizer_state_bytes +
                      (prec.master_param_bytes == 0 ? prec.param_bytes : 0);
  const double written = prec.master_param_bytes + prec.optimizer_state_bytes + prec.param_bytes;
  reduced.push_back(last_backward_);
  int64_t step = b_.optimizer("adamw", shard, read, written, reduced);
  // An fp8 recipe's weight copies, cast once per step from the updated weights (plan/fp8.hpp);
  // the parameter gathers below start after it.
  Fp8Footprint fp8;
  for_each_part([&](int64_t, const std::string&, const std::vector<models::LayerOp>& ops) {
    const Fp8Footprint f = fp8_footprint(ops);
    fp8.params += f.params, fp8.gemms += f.gemms;
  });
  const models::LayerOp cast = fp8_weight_cast(prec, fp8);
  if (!cast.name.empty()) step = b_.compute(site, cast, 1.0, {step});

  if (distributed_optimizer && !plan_.plan.overlap_param_gather()) {
    // Without overlap the updated shards are gathered and copied out before the step ends.
    for_each_part([&](int64_t, const std::string& name, const std::vector<models::LayerOp>& ops) {
      copy_part(gather_part(name, ops, {step}), -1);
    });
  }
}

}  // namespace orrery::plan::detail
