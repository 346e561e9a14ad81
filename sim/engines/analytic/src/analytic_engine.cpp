// The analytic engine: the step time in closed form from the same per-layer programs the
// lowering emits, costed once per distinct layer kind, and composed with the pipeline schedule:
//
//   1F1B / GPipe:  T = (M - 1) * max_p(F_p + B_p + R_p) + sum_p (F_p + B_p + R_p)
//   interleaved:   T = M * max_p(F_p + B_p + R_p) + (pp - 1) / vp * max_p(F_p + B_p + R_p)
//                      + 2 (pp - 1) t_p2p
//
// where F_p, B_p are pipeline rank p's forward and backward time for one micro-batch over all of
// its chunks (TP/EP collectives are blocking unless tp_comm_overlap pipelines them with their
// GEMMs, rank_coster.hpp's overlapped_exposed; CP ring exchanges overlap the attention pieces)
// and R_p its receives' transfers for one micro-batch (posted when the schedule reaches them,
// so on the stage's path; the sum over the stages holds the fill's 2 (pp - 1) crossings),
// then adds the data-parallel tail the lowering puts after the last backward (buckets launched as
// their gradients become final, serialized on the DP stream; under interleaving each chunk's
// after its own last backward), the optimizer and, for ZeRO-1/2, the parameter all-gather
// (overlapped: spread over the warm-up's first forward of each chunk). Compute that runs beside
// hidden communication (CP exchanges, FSDP transfers, the DP reduction under the last backward,
// overlapped ZeRO gathers) runs overlap_slowdown (s) times slower and that communication
// overlap_comm_slowdown (sc) times slower (1 unless a calibration profile says otherwise), as in
// des: while a transfer of T seconds (alone) is in flight beside compute it takes T sc and the
// compute does only T sc / s of work, so the step grows by T sc (1 - 1/s) when the transfer fits
// (beside()), counted with the communication that caused it. A calibrated dispatch overhead
// (ComputeCostModel::dispatch_s) is added once per op the lowering puts on the compute stream, as
// des adds it before each of them. A calibrated rank skew (ComputeCostModel:: skew_wait_s) makes
// every group wait for its slowest member: in-line TP/EP collectives after the compute since the
// previous one, the data-parallel tail after the step's compute. Under moe_a2a_overlap each
// rank's steady-state pairs hide expert all-to-all under the partner pass's compute
// (a2a_overlap_hidden): taken off the M max_p term, never off the fill and drain.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "dp_tail.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/buckets.hpp"
#include "orrery/plan/fp8.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/pipeline_schedule.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/stage_redistribution.hpp"
#include "orrery/sim/analytic_engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/sim/sim_output.hpp"
#include "orrery/topologies/stragglers.hpp"
#include "rank_coster.hpp"

namespace orrery::sim {
namespace {

using detail::beside;
using detail::PassCost;
using detail::RankCoster;

// What one pipeline rank contributes to the step.
struct StageResult {
  double forward_s = 0, backward_s = 0;  // one micro-batch, all chunks
  PassCost per_micro_batch;
  double dp_exposed_s = 0, optimizer_s = 0;
  double optimizer_dispatch_s = 0;  // the dispatch overhead before the optimizer node
  double fsdp_exposed_s = 0;        // per micro-batch
  // moe_a2a_overlap: expert all-to-all time hidden under the paired micro-batch's compute, over
  // the whole step (a2a_overlap_hidden).
  double a2a_hidden_s = 0;
};

// A part (embedding, decoder layer, head) costed once per distinct kind.
struct Costed {
  PassCost fwd, bwd, rcp;
  double dense = 0, expert = 0;
  plan::Fp8Footprint fp8;                  // the part's fp8 GEMMs (plan/fp8.hpp)
  std::pair<double, double> gather_bytes;  // ZeRO-1/2 gathers, (dense, expert)
};

enum class Part { kEmbed, kLayer, kHead };

// One pipeline rank's passes over its chunks for one micro-batch, and its parts with weights in
// forward order: FSDP units, and gradient buckets (filled in backward order, whole parts at a
// time, as the lowering does).
struct StagePasses {
  PassCost fwd, bwd;
  double dense_params = 0, expert_params = 0;
  std::vector<std::pair<double, double>> part_params;  // (dense, expert)
  std::vector<int64_t> part_chunk;                     // the chunk of each part
  std::vector<Part> part_kind;
  std::vector<int64_t> part_layer;  // a decoder layer's index in the model; -1 otherwise
  plan::Fp8Footprint fp8;           // cast once per step after the optimizer (fp8_weight_cast)
  std::vector<std::pair<double, double>> part_gather_bytes;  // (dense, expert), as part_params
};

// An FSDP bucket as the lowering forms it (plan::detail::fsdp_buckets): gathered before the
// forward and (unless it stays resident) before the backward, or its recompute, each gather
// followed by its copy-out, and reduce-scattered after the copy-in of its gradients. The copies
// run on the compute stream.
struct FsdpBucket {
  double params = 0, units = 0;
  double gather_bytes = 0;  // params at the compute dtype; fp8 weights at 1 byte with fp8 gathers
  int64_t chunk = 0;
  bool backward_gather = true;
  pb::Phase backward_phase = pb::PHASE_BACKWARD;  // where the backward gather's copy-out runs
};

// The step of a plan in closed form, in named stages: each pipeline rank costed alone
// (cost_stage: its passes, FSDP exposure, data-parallel tail and optimizer), then the pipeline
// composed over the stages (compose) and the result filled (result).
class AnalyticStep {
 public:
  AnalyticStep(const plan::ResolvedPlan& plan, const CostModels& costs);
  SimOutput run();

 private:
  StageResult cost_stage(int64_t p);
  StagePasses passes(const plan::detail::OpTables& ops, const RankCoster& rc, int64_t p) const;
  std::vector<FsdpBucket> fsdp_buckets(const StagePasses& s) const;
  void add_fsdp_copies(const std::vector<FsdpBucket>& buckets, const RankCoster& rc,
                       StagePasses& s) const;
  void add_stage_gathers(const RankCoster& rc, int64_t rank, int64_t p, StagePasses& s) const;
  double a2a_overlap_hidden(int64_t p, const StagePasses& s) const;
  double fsdp_exposed(const std::vector<FsdpBucket>& buckets, const RankCoster& rc, int64_t rank,
                      size_t units, const StageResult& s) const;
  double dp_tail_exposed(const plan::ResolvedPlan& sp, const RankCoster& rc, int64_t rank,
                         const StagePasses& passes, double step_compute) const;
  void optimizer(const plan::ResolvedPlan& sp, const RankCoster& rc, int64_t rank,
                 const StagePasses& passes, StageResult& s) const;
  double spread_gathers(const std::vector<double>& chunk_gather, double forward_s) const;
  std::vector<int64_t> group_devices(plan::GroupKind kind, int64_t rank) const;
  // The group dense gradients are reduced over (dp, with cp when there is one) and FSDP's, which
  // shards over the same replicas (HSDP: its shard group), as the lowering has them.
  plan::GroupKind grad_group_kind() const {
    return plan_.degrees.cp > 1 ? plan::GroupKind::kDpCp : plan::GroupKind::kDp;
  }
  plan::GroupKind fsdp_group_kind() const {
    return plan_.sharding() == pb::SHARDING_HSDP ? plan::GroupKind::kDpShard : grad_group_kind();
  }
  std::vector<double> receive_seconds(double& hops) const;
  double boundary_seconds(const plan::Redistribution& move) const;
  double pipeline_seconds(const std::vector<double>& recv_s, double hops) const;
  SimOutput result(double step, const std::vector<double>& recv_s) const;

  const plan::ResolvedPlan& plan_;
  const CostModels& costs_;
  const plan::detail::OpTables tables_;
  const plan::RankLayout layout_;
  const double M_;        // micro-batches per step
  const int64_t stages_;  // virtual stages, pp x vp
  const bool fsdp_, dist_opt_;
  // Stages with their own degrees: the pipeline transfers between them (both directions), and
  // the all-gather each receiving TP group runs on its compute stream (stage_redistribution.hpp).
  std::vector<plan::Redistribution> fwd_moves_, bwd_moves_;  // boundary p -> p + 1, p + 1 -> p
  std::vector<StageResult> st_;
  std::vector<int64_t> reps_;  // each pipeline rank's representative
  double recompute_flops_rank_sum_ = 0;
};

AnalyticStep::AnalyticStep(const plan::ResolvedPlan& plan, const CostModels& costs)
    : plan_(plan),
      costs_(costs),
      tables_(plan::detail::make_op_tables(plan)),
      layout_(plan::rank_layout(plan)),
      M_(static_cast<double>(plan.num_micro_batches)),
      stages_(plan.degrees.pp * plan.degrees.vp),
      fsdp_(plan::shards_parameters(plan.sharding())),
      dist_opt_(plan.sharding() == pb::SHARDING_ZERO1 || plan.sharding() == pb::SHARDING_ZERO2) {
  if (!plan.uniform_stages()) {
    for (int64_t p = 0; p + 1 < plan.degrees.pp; ++p) {
      fwd_moves_.push_back(plan::redistribute(plan, layout_, p, p + 1));
      bwd_moves_.push_back(plan::redistribute(plan, layout_, p + 1, p));
    }
  }
}

SimOutput AnalyticStep::run() {
  for (int64_t p = 0; p < plan_.degrees.pp; ++p) st_.push_back(cost_stage(p));
  double hops = 0;
  const std::vector<double> recv_s = receive_seconds(hops);
  const double pipeline = pipeline_seconds(recv_s, hops);
  double step = 0;
  for (const auto& s : st_)
    step = std::max(step, pipeline + s.dp_exposed_s + s.optimizer_dispatch_s + s.optimizer_s);
  return result(step, recv_s);
}

std::vector<int64_t> AnalyticStep::group_devices(plan::GroupKind kind, int64_t rank) const {
  std::vector<int64_t> out;
  for (int64_t r : layout_.group(kind, rank))
    out.push_back(plan_.device_of_rank[static_cast<size_t>(r)]);
  return out;
}

StageResult AnalyticStep::cost_stage(int64_t p) {
  // The stage as its ranks see it (its tp, dp and per-replica micro-batch), and its ops.
  std::optional<plan::ResolvedPlan> view;
  std::optional<plan::detail::OpTables> view_ops;
  const plan::ResolvedPlan& sp = plan_.uniform_stages() ? plan_ : view.emplace(plan_.for_stage(p));
  const plan::detail::OpTables& stage_ops =
      plan_.uniform_stages() ? tables_ : view_ops.emplace(plan::detail::make_op_tables(sp));
  const int64_t rank = layout_.rank({0, 0, 0, p});
  reps_.push_back(rank);
  const RankCoster rc(sp, costs_, layout_, rank);
  StagePasses passes_of_stage = passes(stage_ops, rc, p);
  const std::vector<FsdpBucket> buckets =
      fsdp_ ? fsdp_buckets(passes_of_stage) : std::vector<FsdpBucket>{};
  if (fsdp_) add_fsdp_copies(buckets, rc, passes_of_stage);
  if (!plan_.uniform_stages()) add_stage_gathers(rc, rank, p, passes_of_stage);

  StageResult s;
  s.forward_s = passes_of_stage.fwd.total();
  s.backward_s = passes_of_stage.bwd.total();
  s.per_micro_batch = passes_of_stage.fwd;
  s.per_micro_batch += passes_of_stage.bwd;
  recompute_flops_rank_sum_ += s.per_micro_batch.recompute_flops * M_ *
                               static_cast<double>(plan_.stage(p).world_size() / plan_.degrees.pp);
  // Rank skew: a data-parallel group waits for its slowest member at the step's end, after all
  // of the step's compute (ComputeCostModel::skew_wait_s; des: the counter since the rank last
  // waited on the group).
  const double step_compute = M_ * s.per_micro_batch.compute_s;
  double fsdp_skew = 0;
  if (fsdp_) {
    fsdp_skew = rc.skew_wait_s(layout_.group(fsdp_group_kind(), rank).size(), step_compute);
    s.fsdp_exposed_s = fsdp_exposed(buckets, rc, rank, passes_of_stage.part_params.size(), s);
  }
  s.dp_exposed_s = dp_tail_exposed(sp, rc, rank, passes_of_stage, step_compute) + fsdp_skew;
  optimizer(sp, rc, rank, passes_of_stage, s);
  if (plan_.plan.moe_a2a_overlap()) s.a2a_hidden_s = a2a_overlap_hidden(p, passes_of_stage);
  return s;
}

// moe_a2a_overlap (Megatron-core's combined 1F1B, docs/simulator.md#moe-a2a-overlap): in a
// steady-state pair the forward of one micro-batch and the backward of another run merged, layer
// by layer, in four steps (combined_1f1b.py's schedule_layer_1f1b): the forward's attention beside
// the backward's combine all-to-all, the forward's dispatch beside the backward's MLP/experts, the
// forward's MLP/experts beside the backward's dispatch, the forward's combine beside the
// backward's attention. Each all-to-all is hidden at most up to the compute piece it is paired
// with, both slowed while they overlap (beside()); dispatch and combine move the same tokens, half
// the pass's expert communication each. Priced on the stage's totals, which for uniform layers is
// the sum over layers. Pairs on pipeline rank p: with no pipeline, every micro-batch's forward but
// the first (Megatron: one forward, M - 1 pairs, one backward); under interleaving, the steady
// chunk passes after the combined schedule's warm-up (plan::warmup_passes), each pair a 1/vp
// share of the stage's micro-batch. Warm-up and cool-down passes have no partner: nothing hidden
// there.
double AnalyticStep::a2a_overlap_hidden(int64_t p, const StagePasses& s) const {
  const double slow = costs_.overlap_slowdown(), slow_comm = costs_.overlap_comm_slowdown();
  const auto hidden = [&](double a2a, double compute) {
    return a2a - beside(a2a, compute, slow, slow_comm);
  };
  const double f_a2a = s.fwd.ep_s / 2, b_a2a = s.bwd.ep_s / 2;
  const double per_pair = hidden(b_a2a, s.fwd.attn_s) + hidden(f_a2a, s.bwd.mlp_s) +
                          hidden(b_a2a, s.fwd.mlp_s) + hidden(f_a2a, s.bwd.attn_s);
  const auto& d = plan_.degrees;
  const int64_t chunk_passes = plan_.num_micro_batches * d.vp;
  const int64_t warm_up =
      plan::warmup_passes(plan_.schedule(), d.pp, d.vp, p, plan_.num_micro_batches, true);
  const double pairs = static_cast<double>(chunk_passes - warm_up) / static_cast<double>(d.vp);
  return std::max(0.0, per_pair) * pairs;
}

StagePasses AnalyticStep::passes(const plan::detail::OpTables& ops, const RankCoster& rc,
                                 int64_t p) const {
  auto cost = [&](const std::vector<models::LayerOp>& part) {
    Costed c;
    c.fwd = rc.program(part, pb::PHASE_FORWARD);
    c.bwd = rc.program(part, pb::PHASE_BACKWARD);
    // Full recomputation's re-run, added for the layers it recomputes (recomputes_layer).
    if (plan_.recompute() == pb::RECOMPUTE_FULL) c.rcp = rc.program(part, pb::PHASE_RECOMPUTE);
    c.dense = detail::params_of(part, false);
    c.expert = detail::params_of(part, true);
    c.fp8 = plan::fp8_footprint(part);
    c.gather_bytes = {plan::param_gather_bytes(plan_.precision, part, false),
                      plan::param_gather_bytes(plan_.precision, part, true)};
    return c;
  };
  const Costed embed = cost(ops.embedding), head = cost(ops.head);
  // Each kind of decoder layer (dense or MoE, global or local attention) costed once.
  std::map<const std::vector<models::LayerOp>*, Costed> layers;
  for (int64_t l = 0; l < plan_.model.num_layers(); ++l) {
    const auto& table = ops.layer(plan_.model, l);
    if (layers.count(&table) == 0) layers.emplace(&table, cost(table));
  }
  StagePasses s;
  int64_t chunk = 0;
  auto add = [&](const Costed& c, Part kind, int64_t layer) {
    s.fwd += c.fwd;
    s.bwd += c.bwd;
    // Full recomputation re-runs a decoder layer's forward inside its backward.
    if (kind == Part::kLayer && plan_.recomputes_layer(layer)) s.bwd += c.rcp;
    s.dense_params += c.dense;
    s.expert_params += c.expert;
    s.fp8.params += c.fp8.params, s.fp8.gemms += c.fp8.gemms;
    if (c.dense + c.expert > 0) {
      s.part_params.emplace_back(c.dense, c.expert), s.part_chunk.push_back(chunk),
          s.part_kind.push_back(kind), s.part_gather_bytes.push_back(c.gather_bytes),
          s.part_layer.push_back(layer);
    }
  };
  for (int64_t c = 0; c < plan_.degrees.vp; ++c) {
    chunk = c;
    const int64_t stage = c * plan_.degrees.pp + p;
    if (stage == 0) add(embed, Part::kEmbed, -1);
    const int64_t first = plan_.first_layer(stage);
    for (int64_t l = first; l < first + plan_.layers_per_stage[static_cast<size_t>(stage)]; ++l) {
      add(layers.at(&ops.layer(plan_.model, l)), Part::kLayer, l);
    }
    if (stage == stages_ - 1) add(head, Part::kHead, -1);
  }
  return s;
}

std::vector<FsdpBucket> AnalyticStep::fsdp_buckets(const StagePasses& s) const {
  std::vector<FsdpBucket> out;
  const double limit =
      plan_.plan.bucket_bytes() > 0 ? plan_.plan.bucket_bytes() / plan_.precision.param_bytes : 0;
  const bool tied_single_stage = plan_.model.tied_embeddings() && stages_ == 1;
  // Chunk by chunk (part_chunk runs in order), with the lowering's part keys.
  for (size_t begin = 0; begin < s.part_params.size();) {
    size_t end = begin;
    std::vector<int64_t> keys;
    std::vector<double> params;
    for (; end < s.part_params.size() && s.part_chunk[end] == s.part_chunk[begin]; ++end) {
      keys.push_back(s.part_kind[end] == Part::kEmbed  ? -1
                     : s.part_kind[end] == Part::kHead ? -2
                                                       : 0);
      params.push_back(s.part_params[end].first + s.part_params[end].second);
    }
    for (const plan::detail::FsdpBucketSpan& span :
         plan::detail::fsdp_buckets(keys, params, limit, tied_single_stage)) {
      FsdpBucket b;
      b.params = span.params;
      for (size_t j = begin + span.first; j <= begin + span.last; ++j)
        b.gather_bytes += s.part_gather_bytes[j].first + s.part_gather_bytes[j].second;
      b.units = static_cast<double>(span.last - span.first + 1);
      b.chunk = s.part_chunk[begin];
      b.backward_gather = !span.resident;
      // Gathered for the backward at its last part: before that layer's re-run if recomputed.
      const size_t last = begin + span.last;
      b.backward_phase =
          s.part_kind[last] == Part::kLayer && plan_.recomputes_layer(s.part_layer[last])
              ? pb::PHASE_RECOMPUTE
              : pb::PHASE_BACKWARD;
      out.push_back(b);
    }
    begin = end;
  }
  return out;
}

void AnalyticStep::add_fsdp_copies(const std::vector<FsdpBucket>& buckets, const RankCoster& rc,
                                   StagePasses& s) const {
  const auto& prec = plan_.precision;
  for (const FsdpBucket& fb : buckets) {
    const auto out = plan::detail::fsdp_copy(fb.params, fb.gather_bytes / fb.params);
    s.fwd.compute_s += rc.copy_seconds(out, pb::PHASE_FORWARD, "fsdp.copy_out");
    s.fwd.dispatch_s += rc.dispatch_s();
    if (fb.backward_gather) {
      s.bwd.compute_s += rc.copy_seconds(out, fb.backward_phase, "fsdp.copy_out");
      s.bwd.dispatch_s += rc.dispatch_s();
    }
    s.bwd.compute_s += rc.copy_seconds(plan::detail::fsdp_copy(fb.params, prec.grad_reduce_bytes),
                                       pb::PHASE_BACKWARD, "fsdp.copy_in");
    s.bwd.dispatch_s += rc.dispatch_s();
  }
}

// The all-gathers after receiving activations (forward) and gradients (backward) between stages
// with their own degrees.
void AnalyticStep::add_stage_gathers(const RankCoster& rc, int64_t rank, int64_t p,
                                     StagePasses& s) const {
  const std::vector<int64_t> tp_devs = group_devices(plan::GroupKind::kTp, rank);
  auto gather = [&](PassCost& pass, double bytes) {
    const double t = rc.blocking_collective(pb::COLLECTIVE_KIND_ALL_GATHER, tp_devs, bytes);
    pass.tp_s += t;
    if (t > 0) pass.dispatch_s += rc.dispatch_s();
  };
  if (p > 0) gather(s.fwd, fwd_moves_[static_cast<size_t>(p - 1)].gather_bytes);
  if (p + 1 < plan_.degrees.pp) gather(s.bwd, bwd_moves_[static_cast<size_t>(p)].gather_bytes);
}

// FSDP: each layer's gather (forward and backward) and gradient reduce-scatter, overlapped with
// neighbouring layers' compute when prefetching; the exposed part per micro-batch.
// Gathers and reduce-scatters share one stream (the lowering's kCommDp), in issue order. Without
// prefetching each gather is issued when its part is reached and queues behind the reduce-scatter
// issued just before it: all of them are exposed. Prefetching, a bucket's gather is issued when
// the bucket before it in the pass is reached, so it travels during that bucket's compute (in
// backward together with that bucket's reduce-scatter, issued after it); the first gather of each
// pass (per chunk) has nothing to hide behind, and the last reduce-scatter holds up the next
// pass's first gather (or the optimizer). What does not fit in its window is exposed; a transfer
// and the compute beside it slow each other (beside()). A resident bucket has no backward gather;
// under full recomputation the backward gather comes before the recompute, inside the backward
// window.
double AnalyticStep::fsdp_exposed(const std::vector<FsdpBucket>& buckets, const RankCoster& rc,
                                  int64_t rank, size_t units, const StageResult& s) const {
  const auto& prec = plan_.precision;
  const std::vector<int64_t> group_devs = group_devices(fsdp_group_kind(), rank);
  const double n_units = static_cast<double>(units);
  const double unit_fwd = n_units > 0 ? s.forward_s / n_units : 0;
  const double unit_bwd = n_units > 0 ? s.backward_s / n_units : 0;
  const bool prefetch = plan_.plan.prefetch_buckets() > 0;
  // Per bucket: its gathers (forward, backward), its reduce-scatter, and its compute windows.
  struct Transfers {
    double g = 0, gb = 0, rs = 0, fwd = 0, bwd = 0;
  };
  std::vector<Transfers> c;
  for (const FsdpBucket& fb : buckets) {
    const double g = rc.collective(pb::COLLECTIVE_KIND_ALL_GATHER, group_devs, fb.gather_bytes);
    c.push_back({g, fb.backward_gather ? g : 0,
                 rc.collective(pb::COLLECTIVE_KIND_REDUCE_SCATTER, group_devs,
                               fb.params * prec.grad_reduce_bytes),
                 fb.units * unit_fwd, fb.units * unit_bwd});
  }
  const double slow = costs_.overlap_slowdown(), slow_comm = costs_.overlap_comm_slowdown();
  double exposed = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!prefetch) {
      exposed += c[i].g + c[i].gb + c[i].rs;
      continue;
    }
    const bool first = i == 0 || buckets[i - 1].chunk != buckets[i].chunk;  // in forward
    const bool last =
        i + 1 == c.size() || buckets[i + 1].chunk != buckets[i].chunk;  // first in backward
    exposed += first ? c[i].g + c[i].rs : beside(c[i].g, c[i - 1].fwd, slow, slow_comm);
    // Bucket i's backward gather and bucket i + 1's reduce-scatter, during bucket i + 1's backward.
    exposed += last ? c[i].gb : beside(c[i].gb + c[i + 1].rs, c[i + 1].bwd, slow, slow_comm);
  }
  return exposed;
}

// The data-parallel tail after the last backward: gradient buckets (or HSDP's replica
// all-reduce), each launched late by its slowest member's skew, serialized on the DP stream.
double AnalyticStep::dp_tail_exposed(const plan::ResolvedPlan& sp, const RankCoster& rc,
                                     int64_t rank, const StagePasses& passes,
                                     double step_compute) const {
  const auto& prec = plan_.precision;
  const double bucket_params =
      plan::gradient_bucket_params(plan_.plan, sp.degrees.dp, prec.grad_bytes);
  std::vector<double> buckets;
  std::vector<size_t> bucket_ranks;  // the size of each bucket's group
  std::vector<int64_t> chunks;       // the model chunk of each bucket
  if (!fsdp_) {
    for (const bool expert : {false, true}) {
      for (int64_t c :
           detail::bucket_chunks(passes.part_params, passes.part_chunk, expert, bucket_params))
        chunks.push_back(c);
    }
    const auto kind =
        dist_opt_ ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE;
    const std::vector<int64_t> dense_devs = group_devices(grad_group_kind(), rank);
    const std::vector<int64_t> expert_devs =
        plan_.model.has_moe() ? group_devices(plan::GroupKind::kEdp, rank) : std::vector<int64_t>{};
    for (double b : detail::fill_buckets(passes.part_params, false, bucket_params)) {
      buckets.push_back(rc.collective(kind, dense_devs, b * prec.grad_reduce_bytes));
      bucket_ranks.push_back(dense_devs.size());
    }
    for (double b : detail::fill_buckets(passes.part_params, true, bucket_params)) {
      buckets.push_back(rc.collective(kind, expert_devs, b * prec.grad_reduce_bytes));
      bucket_ranks.push_back(expert_devs.size());
    }
  } else if (plan_.sharding() == pb::SHARDING_HSDP) {
    const std::vector<int64_t> replica_devs = group_devices(plan::GroupKind::kDpReplica, rank);
    buckets.push_back(rc.collective(pb::COLLECTIVE_KIND_ALL_REDUCE, replica_devs,
                                    (passes.dense_params + passes.expert_params) /
                                        static_cast<double>(plan_.plan.shard_group_size()) *
                                        prec.grad_reduce_bytes));
    bucket_ranks.push_back(replica_devs.size());
  }
  // The window the reduction may hide in: the last micro-batch's backward; under interleaving
  // from chunk vp - 1's last backward on, each chunk's buckets launched after its own
  // (chunk_shares).
  const bool overlapped = plan_.plan.overlap_grad_reduce() && !fsdp_;
  const auto& d = plan_.degrees;
  const bool per_chunk = overlapped && d.vp > 1 && d.pp > 1;
  const double span =
      per_chunk ? (1.0 + static_cast<double>((d.vp - 1) * d.pp)) / static_cast<double>(d.vp) : 1.0;
  const std::vector<double> shares =
      per_chunk ? detail::chunk_shares(chunks, d.pp, d.vp) : std::vector<double>{};
  // Each bucket's slowest member launches it late by the skew of the compute it ran before
  // (overlapped: up to its share of the window, as dp_tail places it).
  std::vector<double> late;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double share = !overlapped ? 1.0
                         : per_chunk
                             ? shares[i]
                             : static_cast<double>(i + 1) / static_cast<double>(buckets.size());
    const double before = step_compute - (1 - share) * span * passes.bwd.compute_s;
    late.push_back(rc.skew_wait_s(bucket_ranks[i], before));
  }
  // The reduction under the window and the window's compute slow each other.
  return detail::dp_tail(buckets, span * passes.bwd.total(), overlapped, late,
                         costs_.overlap_slowdown(), costs_.overlap_comm_slowdown(), shares);
}

// AdamW on the rank's (shard of the) parameters and, for ZeRO-1/2, the gathers of the updated
// weights with their copy-outs.
void AnalyticStep::optimizer(const plan::ResolvedPlan& sp, const RankCoster& rc, int64_t rank,
                             const StagePasses& passes, StageResult& s) const {
  const auto& prec = plan_.precision;
  const double shard = passes.dense_params / static_cast<double>(sp.dense_shard_degree()) +
                       passes.expert_params / static_cast<double>(sp.expert_shard_degree());
  const double read = prec.master_param_bytes + prec.grad_bytes + prec.optimizer_state_bytes +
                      (prec.master_param_bytes == 0 ? prec.param_bytes : 0);
  const double written = prec.master_param_bytes + prec.optimizer_state_bytes + prec.param_bytes;
  // Shaped as the lowering's optimizer node ([parameters]), so shape corrections apply alike.
  const int64_t optimizer_shape[] = {static_cast<int64_t>(shard)};
  s.optimizer_s = rc.sharing() * costs_.compute().seconds(rc.device(), pb::OP_CLASS_OPTIMIZER,
                                                          12.0 * shard, shard * (read + written),
                                                          optimizer_shape, pb::PHASE_OPTIMIZER);
  s.optimizer_dispatch_s = rc.dispatch_s();  // the optimizer node, on the compute stream
  // An fp8 recipe's weight cast after it, on the compute stream too (the lowering's node).
  const models::LayerOp cast = plan::fp8_weight_cast(prec, passes.fp8);
  if (!cast.name.empty()) {
    s.optimizer_s += rc.op_seconds(cast, pb::PHASE_OPTIMIZER, 1.0);
    s.optimizer_dispatch_s += rc.dispatch_s();
  }
  if (!dist_opt_) return;
  // Each part's updated weights, as the lowering gathers them (gather_part).
  const std::vector<int64_t> dense_devs = group_devices(grad_group_kind(), rank);
  const std::vector<int64_t> expert_devs =
      plan_.model.has_moe() ? group_devices(plan::GroupKind::kEdp, rank) : std::vector<int64_t>{};
  // Each gathered part is copied into its parameters on the compute stream (copy_part).
  double gather = 0, copy = 0;
  std::vector<double> chunk_gather(static_cast<size_t>(plan_.degrees.vp), 0.0);
  auto copy_out = [&](double params, size_t members) {
    if (params <= 0 || members < 2) return;
    copy += rc.dispatch_s() + rc.copy_seconds(plan::detail::fsdp_copy(params, prec.param_bytes),
                                              pb::PHASE_OPTIMIZER, "zero.copy_out");
  };
  for (size_t i = 0; i < passes.part_params.size(); ++i) {
    const auto& [dense_p, expert_p] = passes.part_params[i];
    const auto [dense_b, expert_b] = passes.part_gather_bytes[i];  // plan::param_gather_bytes
    const double t = rc.collective(pb::COLLECTIVE_KIND_ALL_GATHER, dense_devs, dense_b) +
                     rc.collective(pb::COLLECTIVE_KIND_ALL_GATHER, expert_devs, expert_b);
    gather += t;
    chunk_gather[static_cast<size_t>(passes.part_chunk[i])] += t;
    copy_out(dense_p, dense_devs.size());
    copy_out(expert_p, expert_devs.size());
  }
  // Overlapped with the next step's forwards when asked; otherwise at the step's end, after the
  // optimizer's compute (its skew). The copies are compute either way.
  s.dp_exposed_s += copy + (plan_.plan.overlap_param_gather()
                                ? spread_gathers(chunk_gather, s.forward_s)
                                : gather + rc.skew_wait_s(dense_devs.size(), s.optimizer_s));
}

// ZeRO-1/2's overlapped parameter gathers, issued at the step's start in forward order on the DP
// stream, each part's waited for by its first forward (the lowering's start_step). Without
// interleaving they hide behind the first micro-batch's forward (`forward_s`, all chunks). Under
// interleaving chunk c's first forward comes after c x pp chunk forwards of the warm-up
// (Megatron's per-chunk gathers dispatched ahead of each chunk's forward), so the gathers of
// chunks 0 .. c must be done by the end of that forward, (c pp + 1) forward_s / vp into the step;
// what the tightest of these deadlines misses is exposed (compute beside it slowed, beside()).
double AnalyticStep::spread_gathers(const std::vector<double>& chunk_gather,
                                    double forward_s) const {
  const auto& d = plan_.degrees;
  const double s = costs_.overlap_slowdown(), sc = costs_.overlap_comm_slowdown();
  double total = 0;
  for (double g : chunk_gather) total += g;
  if (d.vp == 1 || d.pp == 1) return beside(total, forward_s, s, sc);
  double exposed = 0, gathered = 0;
  for (int64_t c = 0; c < d.vp; ++c) {
    gathered += chunk_gather[static_cast<size_t>(c)];
    const double window = static_cast<double>(c * d.pp + 1) * forward_s / static_cast<double>(d.vp);
    exposed = std::max(exposed, beside(gathered, window, s, sc));
  }
  return exposed;
}

// Each rank's sends run one after another on its send stream and its receives on its receive
// stream: a boundary between stages with their own degrees takes as long as its busiest rank's
// serialized transfers.
double AnalyticStep::boundary_seconds(const plan::Redistribution& move) const {
  std::map<int64_t, double> busy;
  for (const auto& x : move.transfers) {
    const double t =
        costs_.collectives().p2p_seconds(plan_.device_of_rank[static_cast<size_t>(x.from)],
                                         plan_.device_of_rank[static_cast<size_t>(x.to)], x.bytes);
    busy[2 * x.from] += t;
    busy[2 * x.to + 1] += t;
  }
  double most = 0;
  for (const auto& [key, t] : busy) most = std::max(most, t);
  return most;
}

// A stage posts each receive when its schedule reaches it (the lowering's receive_posted_after)
// and a transfer starts once both ends are posted, so every micro-batch's receives lie on its
// stage's path: recv_s[p] per micro-batch. The fill and the drain cross every boundary once each
// way: the sum over the stages holds those crossings for 1F1B and GPipe; `hops` adds them to the
// interleaved formula.
std::vector<double> AnalyticStep::receive_seconds(double& hops) const {
  const auto& d = plan_.degrees;
  std::vector<double> recv_s(st_.size(), 0.0);
  if (!plan_.uniform_stages()) {
    for (size_t b = 0; b < fwd_moves_.size(); ++b) {
      const double act = boundary_seconds(fwd_moves_[b]), grad = boundary_seconds(bwd_moves_[b]);
      recv_s[b + 1] += act;
      recv_s[b] += grad;
      hops += act + grad;
    }
  } else if (d.pp > 1) {
    double tokens = static_cast<double>(plan_.micro_batch_size * plan_.seq_len / d.cp);
    if (plan_.sequence_parallel()) tokens /= static_cast<double>(d.tp);
    const double bytes =
        tokens * static_cast<double>(plan_.model.hidden_size()) * plan_.precision.activation_bytes;
    auto hop = [&](int64_t from, int64_t to) {
      return costs_.collectives().p2p_seconds(
          plan_.device_of_rank[static_cast<size_t>(reps_[static_cast<size_t>(from)])],
          plan_.device_of_rank[static_cast<size_t>(reps_[static_cast<size_t>(to)])], bytes);
    };
    for (int64_t p = 0; p < d.pp; ++p) {
      // With vp chunks a stage receives vp activations and vp gradients per micro-batch, less the
      // first chunk's activations on the first stage and the last chunk's gradients on the last.
      const int64_t prev = (p + d.pp - 1) % d.pp, next = (p + 1) % d.pp;
      recv_s[static_cast<size_t>(p)] =
          static_cast<double>(d.vp - (p == 0 ? 1 : 0)) * hop(prev, p) +
          static_cast<double>(d.vp - (p == d.pp - 1 ? 1 : 0)) * hop(next, p);
      if (p + 1 < d.pp) hops += hop(p, p + 1) + hop(p + 1, p);
    }
  }
  return recv_s;
}

// The pipeline's time for the step's micro-batches (the header comment's formulas).
double AnalyticStep::pipeline_seconds(const std::vector<double>& recv_s, double hops) const {
  const auto& d = plan_.degrees;
  // `paired`: the steady state's micro-batch time, the all-to-all hidden by moe_a2a_overlap's
  // pairs taken out (averaged over the micro-batches); the fill and drain keep the unpaired time.
  double slowest = 0, sum = 0, paired = 0;
  for (size_t p = 0; p < st_.size(); ++p) {
    const double mb = st_[p].forward_s + st_[p].backward_s + st_[p].fsdp_exposed_s + recv_s[p];
    sum += mb;
    slowest = std::max(slowest, mb);
    paired = std::max(paired, mb - st_[p].a2a_hidden_s / M_);
  }
  if (d.pp == 1) return M_ * paired;
  if (plan_.schedule() == pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) {
    return M_ * paired + static_cast<double>(d.pp - 1) / static_cast<double>(d.vp) * slowest + hops;
  }
  return (M_ - 1) * slowest + sum;
}

// The breakdown follows the pipeline rank with the most work of its own; whatever the step holds
// beyond that rank's work and tail is its bubble, so the terms add up to the step.
SimOutput AnalyticStep::result(double step, const std::vector<double>& recv_s) const {
  size_t critical = 0;
  double most = -1;
  for (size_t p = 0; p < st_.size(); ++p) {
    const auto& s = st_[p];
    const double own = M_ * (s.forward_s + s.backward_s + s.fsdp_exposed_s + recv_s[p]) -
                       s.a2a_hidden_s + s.dp_exposed_s + s.optimizer_dispatch_s + s.optimizer_s;
    if (own > most) most = own, critical = p;
  }
  SimOutput out;
  pb::SimResult& r = out.result;
  r.set_engine("analytic");
  r.set_model(plan_.model.name());
  r.set_cluster(plan_.cluster.name());
  r.set_step_time_s(step);
  const StageResult& c = st_[critical];
  auto* b = r.mutable_breakdown();
  b->set_compute_s(M_ * c.per_micro_batch.compute_s);
  b->set_recompute_s(M_ * c.per_micro_batch.recompute_s);
  b->set_optimizer_s(c.optimizer_s);
  b->set_dispatch_s(M_ * c.per_micro_batch.dispatch_s + c.optimizer_dispatch_s);
  auto add_comm = [&](const char* name, double seconds) {
    if (seconds <= 0) return;
    auto* e = b->add_exposed_comm();
    e->set_name(name);
    e->set_seconds(seconds);
  };
  add_comm("tp", M_ * c.per_micro_batch.tp_s);
  add_comm("cp", M_ * c.per_micro_batch.cp_s);
  add_comm("ep", M_ * c.per_micro_batch.ep_s - c.a2a_hidden_s);
  add_comm("pp", M_ * recv_s[critical]);
  add_comm("dp", c.dp_exposed_s + M_ * c.fsdp_exposed_s);
  const double accounted = M_ * (c.forward_s + c.backward_s + c.fsdp_exposed_s + recv_s[critical]) -
                           c.a2a_hidden_s + c.dp_exposed_s + c.optimizer_dispatch_s + c.optimizer_s;
  b->set_pipeline_bubble_s(std::max(0.0, step - accounted));
  for (auto& m : memory_per_stage(plan_)) *r.add_memory() = std::move(m);
  fill_throughput(plan_, recompute_flops_rank_sum_, r);
  return out;
}

}  // namespace

SimOutput simulate_analytic(const plan::ResolvedPlan& plan, const CostModels& costs) {
  // A straggler breaks the symmetry every closed form here rests on (one rank stands for its
  // stage): refused, never priced as if absent.
  if (topologies::has_stragglers(plan.cluster)) {
    throw base::InputError(
        "", 0, "cluster.stragglers",
        "the analytic engine does not simulate stragglers (" +
            std::to_string(plan.cluster.stragglers_size()) +
            " listed); use the des engine (--engine des), which slows the GPU or link and lets "
            "every collective wait for it");
  }
  return AnalyticStep(plan, costs).run();
}

}  // namespace orrery::sim
