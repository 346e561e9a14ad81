// The analytic engine: the step time in closed form from the same per-layer programs the
// lowering emits, costed once per distinct layer kind, and composed with the pipeline schedule:
//
//   1F1B / GPipe:  T = (M - 1) * max_p(F_p + B_p + R_p) + sum_p (F_p + B_p + R_p)
//   interleaved:   T = M * max_p(F_p + B_p + R_p) + (pp - 1) / vp * max_p(F_p + B_p + R_p)
//                      + 2 (pp - 1) t_p2p
//
// where F_p, B_p are pipeline rank p's forward and backward time for one micro-batch over all of
// its chunks (TP/EP collectives are blocking, CP ring exchanges overlap the attention pieces)
// and R_p its receives' transfers for one micro-batch (posted when the schedule reaches them,
// so on the stage's path; the sum over the stages holds the fill's 2 (pp - 1) crossings),
// then adds the data-parallel tail the lowering puts after the last backward (buckets launched as
// their gradients become final, serialized on the DP stream), the optimizer and, for ZeRO-1/2,
// the parameter all-gather. Compute that runs beside hidden communication (CP exchanges, FSDP
// transfers, the DP reduction under the last backward, overlapped ZeRO gathers) runs
// overlap_slowdown (s) times slower and that communication overlap_comm_slowdown (sc) times
// slower (1 unless a calibration profile says otherwise), as in des: while a transfer of T
// seconds (alone) is in flight beside compute it takes T sc and the compute does only T sc / s
// of work, so the step grows by T sc (1 - 1/s) when the transfer fits (beside()), counted with
// the communication that caused it. A calibrated dispatch
// overhead (ComputeCostModel::dispatch_s) is added once per op the lowering puts on the compute
// stream, as des adds it before each of them. A calibrated rank skew (ComputeCostModel::
// skew_wait_s) makes every group wait for its slowest member: in-line TP/EP collectives after the
// compute since the previous one, the data-parallel tail after the step's compute.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "layer_program.hpp"
#include "lower_rank.hpp"
#include "orrery/models/layer_ops.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/sim/rank_layout.hpp"
#include "orrery/sim/stage_redistribution.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/traces/error.hpp"

namespace orrery::sim {
namespace {

using detail::Step;

// The time beyond `window` seconds of compute (alone) that `transfer` seconds of communication
// (alone) launched beside it at its start add, when compute beside communication runs s times
// slower and communication beside compute sc times slower (des: the rank's slowed pstate and
// its transfers' slowed rate). While both run, the compute does t / s of work and the transfer
// t / sc. If the transfer ends first (transfer x sc <= window x s), the compute has lost
// transfer x sc x (1 - 1/s); otherwise the compute ends at window x s, the transfer having done
// window x s / sc, and the rest of it runs alone. With s = sc = 1 this is max(0, transfer - window).
double beside(double transfer, double window, double s, double sc) {
  if (transfer <= 0) return 0;
  if (transfer * sc <= window * s) return transfer * sc * (1 - 1 / s);
  return transfer - window * s / sc + window * (s - 1);
}

// Time of one pass over some ops, split the way the breakdown reports it.
struct PassCost {
  double compute_s = 0;
  double recompute_s = 0;  // part of compute_s
  double tp_s = 0, ep_s = 0, cp_s = 0;
  double dispatch_s = 0;  // the dispatch overhead of the pass's compute-stream ops
  double flops = 0, recompute_flops = 0;
  double total() const { return compute_s + tp_s + ep_s + cp_s + dispatch_s; }
  PassCost& operator+=(const PassCost& o) {
    compute_s += o.compute_s, recompute_s += o.recompute_s, tp_s += o.tp_s, ep_s += o.ep_s;
    cp_s += o.cp_s, dispatch_s += o.dispatch_s, flops += o.flops, recompute_flops += o.recompute_flops;
    return *this;
  }
  PassCost scaled(double k) const {
    PassCost c = *this;
    c.compute_s *= k, c.recompute_s *= k, c.tp_s *= k, c.ep_s *= k, c.cp_s *= k, c.dispatch_s *= k;
    c.flops *= k, c.recompute_flops *= k;
    return c;
  }
};

bool is_expert_op(const models::LayerOp& op) { return op.name.rfind("moe.experts", 0) == 0; }

class RankCoster {
 public:
  RankCoster(const ResolvedPlan& plan, const CostModels& costs, const RankLayout& layout, int64_t rank)
      : plan_(plan), costs_(costs), device_(device_of(plan, rank)), my_device_(plan.device_of_rank[static_cast<size_t>(rank)]),
        sharing_(costs.host_sharing(plan, rank)) {
    auto devices = [&](GroupKind k) {
      std::vector<int64_t> out;
      for (int64_t r : layout.group(k, rank)) out.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      return out;
    };
    tp_ = devices(GroupKind::kTp);
    if (plan.degrees.ep > 1) ep_ = devices(GroupKind::kEp);
    if (plan.degrees.cp > 1) {
      const auto ring = layout.group(GroupKind::kCp, rank);
      const int64_t me = layout.index_in_group(GroupKind::kCp, rank);
      cp_next_ = plan.device_of_rank[static_cast<size_t>(ring[static_cast<size_t>((me + 1) % plan.degrees.cp)])];
    }
  }

  // FSDP's copy-in or copy-out (layer_program.hpp), as the lowering's node is costed.
  // `op`: the lowering's ExecNode.op for it ("fsdp.copy_out", "fsdp.copy_in").
  double copy_seconds(const detail::CopyWork& w, pb::Phase phase, std::string_view op) const {
    return sharing_ * costs_.compute().seconds(device_, pb::OP_CLASS_COPY, 0, w.bytes_read + w.bytes_written,
                                               w.shape, phase, op);
  }

  double op_seconds(const models::LayerOp& op, pb::Phase phase, double scale) const {
    const auto w = detail::op_work(op, phase);
    // A scaled op (a CP ring's piece) no longer has the op's shape: no shape corrections.
    return sharing_ * costs_.compute().seconds(device_, op.op_class, w.flops * scale,
                                               (w.bytes_read + w.bytes_written) * scale,
                                               scale == 1.0 ? std::span<const int64_t>(op.shape)
                                                            : std::span<const int64_t>(),
                                               phase, op.name);
  }
  // The slowdown from the plan's other ranks on this rank's host (CostModels::host_sharing).
  double sharing() const { return sharing_; }

  PassCost program(const std::vector<models::LayerOp>& ops, pb::Phase phase) const {
    PassCost c;
    // The compute since the last in-line collective: its group waits for its slowest member
    // that much skew (ComputeCostModel::skew_wait_s). What follows the last collective is the
    // next layer's, and runs before its first collective: the first collective's wait is charged
    // at the end, for the compute before it and after the last one together (one
    // synchronization, whose jitter is paid once).
    double since = 0, before_first = 0;
    const std::vector<int64_t>* first_group = nullptr;
    double* first_term = nullptr;
    for (const Step& s : detail::layer_program(ops, plan_, phase)) {
      switch (s.kind) {
        case Step::Kind::kCompute: {
          const double t = op_seconds(*s.op, s.phase, 1.0);
          const double f = detail::op_work(*s.op, s.phase).flops;
          c.compute_s += t;
          c.dispatch_s += dispatch_s();
          c.flops += f;
          since += t;
          if (s.phase == pb::PHASE_RECOMPUTE) c.recompute_s += t, c.recompute_flops += f;
          break;
        }
        case Step::Kind::kRing: {
          const double cp = static_cast<double>(plan_.degrees.cp);
          const double piece = op_seconds(*s.op, s.phase, 1.0 / cp);
          const double exchange = costs_.collectives().p2p_seconds(my_device_, cp_next_, s.ring_bytes);
          c.compute_s += cp * piece;
          c.dispatch_s += cp * dispatch_s();  // one compute node per piece
          since += cp * piece;
          // Each exchange beside a piece: both slowed while they overlap (as in des).
          c.cp_s += (cp - 1) * beside(exchange, piece, costs_.overlap_slowdown(), costs_.overlap_comm_slowdown());
          const double f = detail::op_work(*s.op, s.phase).flops;
          c.flops += f;
          if (s.phase == pb::PHASE_RECOMPUTE) c.recompute_s += cp * piece, c.recompute_flops += f;
          break;
        }
        case Step::Kind::kCollective: {
          const auto& devs = s.expert_group ? ep_ : tp_;
          if (devs.size() < 2) break;
          double& term = s.expert_group ? c.ep_s : c.tp_s;
          // Issued in line with compute: the calibrated blocking overhead too (collective_cost.hpp).
          term += costs_.collectives().estimate(s.collective, devs, s.bytes).seconds +
                  costs_.collectives().blocking_overhead_s(s.collective, devs);
          if (first_group == nullptr) {
            first_group = &devs, first_term = &term, before_first = since;
          } else {
            term += skew_wait_s(devs.size(), since);
          }
          since = 0;
          c.dispatch_s += dispatch_s();
          break;
        }
      }
    }
    if (first_group != nullptr) {
      *first_term += skew_wait_s(first_group->size(), before_first + since);
    } else if (tp_.size() > 1) {  // a part without collectives: the next TP collective's
      c.tp_s += skew_wait_s(tp_.size(), since);
    } else if (ep_.size() > 1) {  // a dense layer of an MoE model: the next EP collective's
      c.ep_s += skew_wait_s(ep_.size(), since);
    }
    return c;
  }

  double collective(pb::CollectiveKind kind, const std::vector<int64_t>& devs, double bytes) const {
    if (devs.size() < 2 || bytes <= 0) return 0;
    return costs_.collectives().estimate(kind, devs, bytes).seconds;
  }

  // A collective issued in line with compute (on the compute stream): its time plus the
  // calibrated blocking overhead.
  double blocking_collective(pb::CollectiveKind kind, const std::vector<int64_t>& devs, double bytes) const {
    if (devs.size() < 2 || bytes <= 0) return 0;
    return collective(kind, devs, bytes) + costs_.collectives().blocking_overhead_s(kind, devs);
  }

  const pb::DeviceSpec& device() const { return device_; }
  // The calibrated host time before each op on this rank's compute stream.
  double dispatch_s() const { return costs_.compute().dispatch_s(device_); }
  // The expected wait for the slowest of `ranks` ranks after `compute_s` of compute.
  double skew_wait_s(size_t ranks, double compute_s) const {
    return costs_.compute().skew_wait_s(device_, static_cast<int64_t>(ranks), compute_s);
  }
  int64_t device_index() const { return my_device_; }

 private:
  const ResolvedPlan& plan_;
  const CostModels& costs_;
  const pb::DeviceSpec& device_;
  int64_t my_device_;
  double sharing_;
  std::vector<int64_t> tp_, ep_;
  int64_t cp_next_ = -1;
};

double params_of(const std::vector<models::LayerOp>& ops, bool expert) {
  double p = 0;
  for (const auto& op : ops) {
    if (is_expert_op(op) == expert) p += op.parameters;
  }
  return p;
}

// The serialized DP stream after the last backward: bucket i becomes ready when the window's
// compute (the last micro-batch's backward, `window` seconds alone) has done (i + 1) / n of its
// work, or all of it without overlap, `late[i]` later when its group's slowest member launches
// it late (rank skew), and then waits for the stream. While a bucket is in flight beside that
// compute, the compute runs s times slower and the bucket sc times slower (see beside()); the
// walk goes from one event (a share of the compute reached, a launch, a bucket's end) to the
// next. Returns the time past the window's end, the compute's slowing included.
double dp_tail(const std::vector<double>& buckets, double window, bool overlap,
               const std::vector<double>& late = {}, double s = 1, double sc = 1) {
  const size_t n = buckets.size();
  if (n == 0) return 0;
  auto ready_work = [&](size_t i) {
    return overlap ? window * static_cast<double>(i + 1) / static_cast<double>(n) : window;
  };
  auto launch_at = [&](size_t i, double ready) { return ready + (i < late.size() ? late[i] : 0); };
  constexpr double kEps = 1e-15;
  double t = 0, work = 0;         // wall clock; compute done (seconds alone)
  size_t next = 0;                // the bucket in flight or next to launch
  double left = 0;                // its communication still to do (seconds alone)
  bool flying = false;
  std::vector<double> ready(n, -1);  // when the compute reached each bucket's share
  while (next < n) {
    for (size_t i = next; i < n && ready_work(i) <= work + kEps * window; ++i) {  // those before were launched
      if (ready[i] < 0) ready[i] = t;
    }
    if (!flying && ready[next] >= 0 && launch_at(next, ready[next]) <= t) flying = true, left = buckets[next];
    const bool computing = work < window - kEps * window;
    const double compute_rate = flying ? 1 / s : 1, comm_rate = computing ? 1 / sc : 1;
    double dt = std::numeric_limits<double>::infinity();
    if (computing) {
      double target = window;  // the next share some bucket waits for
      for (size_t i = next; i < n; ++i) {
        if (ready[i] < 0) { target = ready_work(i); break; }
      }
      dt = std::min(dt, (target - work) / compute_rate);
    }
    if (flying) dt = std::min(dt, left / comm_rate);
    else if (ready[next] >= 0) dt = std::min(dt, launch_at(next, ready[next]) - t);
    // A time that is not finite (a latency of 1e308 once made one) turns into NaN here and the
    // walk would never reach its end: fail loudly instead of spinning.
    ORRERY_CHECK(std::isfinite(dt),
                 "dp_tail: a bucket, the window or a launch delay is not finite");
    t += dt;
    if (computing) work = std::min(window, work + dt * compute_rate);
    if (flying) {
      left -= dt * comm_rate;
      if (left <= kEps * std::max(1.0, buckets[next])) flying = false, ++next;
    }
  }
  // Compute left after the last bucket runs alone.
  return std::max(0.0, t + (window - work) - window);
}

// Buckets as the lowering fills them: parts in backward order (reverse of `parts`), whole parts
// at a time, closed once they hold at least `bucket_params`.
std::vector<double> fill_buckets(const std::vector<std::pair<double, double>>& parts, bool expert,
                                 double bucket_params) {
  std::vector<double> out;
  double filled = 0;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    const double p = expert ? it->second : it->first;
    if (p <= 0) continue;
    filled += p;
    if (filled >= bucket_params) out.push_back(filled), filled = 0;
  }
  if (filled > 0) out.push_back(filled);
  return out;
}

struct StageResult {
  double forward_s = 0, backward_s = 0;  // one micro-batch, all chunks
  PassCost per_micro_batch;
  double dp_exposed_s = 0, optimizer_s = 0;
  double optimizer_dispatch_s = 0;  // the dispatch overhead before the optimizer node
  double fsdp_exposed_s = 0;  // per micro-batch
};

}  // namespace

const char* to_string(EngineKind kind) { return kind == EngineKind::kAnalytic ? "analytic" : "des"; }

CostModels::CostModels(const topologies::Topology& topology, std::string dtype,
                       const pb::CalibrationProfile* calibration)
    : compute_(std::move(dtype), calibration), collectives_(topology, calibration),
      calibration_(calibration) {}

double CostModels::host_sharing(const ResolvedPlan& plan, int64_t rank) const {
  const pb::HostSharing* h = compute_.host_sharing(device_of(plan, rank));
  if (h == nullptr) return 1;
  const auto& topology = collectives_.topology();
  const int64_t node = topology.device(plan.device_of_rank[static_cast<size_t>(rank)]).node;
  int64_t ranks = 0;
  for (int64_t d : plan.device_of_rank) ranks += topology.device(d).node == node ? 1 : 0;
  return host_sharing_factor(*h, ranks);
}

double CostModels::overlap_slowdown() const {
  if (calibration_ != nullptr && calibration_->overlap_compute_slowdown() > 0) {
    return calibration_->overlap_compute_slowdown();
  }
  return 1.0;
}

double CostModels::overlap_comm_slowdown() const {
  if (calibration_ != nullptr && calibration_->overlap_comm_slowdown() > 0) {
    return calibration_->overlap_comm_slowdown();
  }
  return 1.0;
}

void fill_throughput(const ResolvedPlan& plan, double recompute_flops_per_step, pb::SimResult& r) {
  const double tokens = static_cast<double>(plan.plan.job().global_batch_size() * plan.seq_len);
  const auto stats = models::model_stats(plan.model, plan.seq_len);
  const double model_flops = stats.training_flops_per_token * tokens;
  // Every device of the cluster runs one rank (resolve_plan checks it): sum peaks by node group.
  double peak = 0;
  for (const auto& g : plan.cluster.node_groups()) {
    for (const auto& nt : plan.cluster.node_types()) {
      if (nt.name() != g.node_type()) continue;
      const auto& d = topologies::find_device(plan.cluster, nt.device());
      const double p = topologies::peak_flops(d, plan.precision.dtype);
      peak += static_cast<double>(g.count() * nt.devices_per_node()) * (p > 0 ? p : d.peak_flops().fp32());
    }
  }
  r.set_tokens_per_s(r.step_time_s() > 0 ? tokens / r.step_time_s() : 0);
  r.set_mfu(r.step_time_s() > 0 ? model_flops / (r.step_time_s() * peak) : 0);
  r.set_hfu(r.step_time_s() > 0 ? (model_flops + recompute_flops_per_step) / (r.step_time_s() * peak) : 0);
}

SimOutput simulate_analytic(const ResolvedPlan& plan, const CostModels& costs) {
  const auto t = detail::make_op_tables(plan);
  const auto& d = plan.degrees;
  const auto& prec = plan.precision;
  const auto sharding = plan.sharding();
  const bool fsdp = sharding == pb::SHARDING_ZERO3 || sharding == pb::SHARDING_FSDP ||
                    sharding == pb::SHARDING_HSDP;
  const bool dist_opt = sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2;
  const RankLayout layout = rank_layout(plan);
  const double M = static_cast<double>(plan.num_micro_batches);
  const int64_t stages = d.pp * d.vp;
  // Stages with their own degrees: the pipeline transfers between them (both directions), and
  // the all-gather each receiving TP group runs on its compute stream (stage_redistribution.hpp).
  std::vector<Redistribution> fwd_moves, bwd_moves;  // boundary p -> p + 1, p + 1 -> p
  if (!plan.uniform_stages()) {
    for (int64_t p = 0; p + 1 < d.pp; ++p) {
      fwd_moves.push_back(redistribute(plan, layout, p, p + 1));
      bwd_moves.push_back(redistribute(plan, layout, p + 1, p));
    }
  }

  std::vector<StageResult> st(static_cast<size_t>(d.pp));
  std::vector<int64_t> reps;
  double recompute_flops_rank_sum = 0;
  for (int64_t p = 0; p < d.pp; ++p) {
    // The stage as its ranks see it (its tp, dp and per-replica micro-batch), and its ops.
    std::optional<ResolvedPlan> view;
    std::optional<detail::OpTables> view_ops;
    const ResolvedPlan& sp = plan.uniform_stages() ? plan : view.emplace(plan.for_stage(p));
    const detail::OpTables& stage_ops = plan.uniform_stages() ? t : view_ops.emplace(detail::make_op_tables(sp));
    const double bucket_params = plan.plan.bucket_bytes() > 0 ? plan.plan.bucket_bytes() / prec.grad_bytes
                                                              : std::max(40e6, 1e6 * static_cast<double>(sp.degrees.dp));
    const int64_t rank = layout.rank({0, 0, 0, p});
    reps.push_back(rank);
    RankCoster rc(sp, costs, layout, rank);
    StageResult& s = st[static_cast<size_t>(p)];
    // Per distinct part, costed once.
    struct Costed { PassCost fwd, bwd, rcp; double dense = 0, expert = 0; };
    auto cost = [&](const std::vector<models::LayerOp>& ops) {
      Costed c;
      c.fwd = rc.program(ops, pb::PHASE_FORWARD);
      c.bwd = rc.program(ops, pb::PHASE_BACKWARD);
      if (plan.recompute() == pb::RECOMPUTE_FULL) c.rcp = rc.program(ops, pb::PHASE_RECOMPUTE);
      c.dense = params_of(ops, false);
      c.expert = params_of(ops, true);
      return c;
    };
    const Costed embed = cost(stage_ops.embedding), head = cost(stage_ops.head);
    const Costed dense = stage_ops.dense_layer.empty() ? Costed{} : cost(stage_ops.dense_layer);
    const Costed moe = stage_ops.moe_layer.empty() ? Costed{} : cost(stage_ops.moe_layer);
    PassCost fwd, bwd;
    double dense_params = 0, expert_params = 0;
    // Parts in forward order with their weights: FSDP units, and gradient buckets (filled in
    // backward order, whole parts at a time, as the lowering does).
    std::vector<std::pair<double, double>> part_params;  // (dense, expert)
    std::vector<int64_t> part_chunk;                      // the chunk of each part
    enum class Part { kEmbed, kLayer, kHead };
    std::vector<Part> part_kind;
    int64_t chunk = 0;
    auto add = [&](const Costed& c, Part kind) {
      fwd += c.fwd;
      bwd += c.bwd;
      // Full recomputation re-runs a decoder layer's forward inside its backward.
      if (kind == Part::kLayer) bwd += c.rcp;
      dense_params += c.dense;
      expert_params += c.expert;
      if (c.dense + c.expert > 0) {
        part_params.emplace_back(c.dense, c.expert), part_chunk.push_back(chunk), part_kind.push_back(kind);
      }
    };
    for (int64_t c = 0; c < d.vp; ++c) {
      chunk = c;
      const int64_t stage = c * d.pp + p;
      if (stage == 0) add(embed, Part::kEmbed);
      const int64_t first = plan.first_layer(stage);
      for (int64_t l = first; l < first + plan.layers_per_stage[static_cast<size_t>(stage)]; ++l) {
        const bool is_moe = plan.model.has_moe() && l >= plan.model.moe().first_dense_layers();
        add(is_moe ? moe : dense, Part::kLayer);
      }
      if (stage == stages - 1) add(head, Part::kHead);
    }
    // FSDP buckets as the lowering forms them (detail::fsdp_buckets): gathered before the forward
    // and (unless it stays resident)
    // before the backward, or its recompute, each gather followed by its copy-out, and
    // reduce-scattered after the copy-in of its gradients. The copies run on the compute stream.
    struct FsdpBucket {
      double params = 0, units = 0;
      int64_t chunk = 0;
      bool backward_gather = true;
      pb::Phase backward_phase = pb::PHASE_BACKWARD;  // where the backward gather's copy-out runs
    };
    std::vector<FsdpBucket> fsdp_buckets;
    if (fsdp) {
      const double limit = plan.plan.bucket_bytes() > 0 ? plan.plan.bucket_bytes() / prec.param_bytes : 0;
      const bool full_recompute = plan.recompute() == pb::RECOMPUTE_FULL;
      const bool tied_single_stage = plan.model.tied_embeddings() && stages == 1;
      // Chunk by chunk (part_chunk runs in order), with the lowering's part keys.
      for (size_t begin = 0; begin < part_params.size();) {
        size_t end = begin;
        std::vector<int64_t> keys;
        std::vector<double> params;
        for (; end < part_params.size() && part_chunk[end] == part_chunk[begin]; ++end) {
          keys.push_back(part_kind[end] == Part::kEmbed ? -1 : part_kind[end] == Part::kHead ? -2 : 0);
          params.push_back(part_params[end].first + part_params[end].second);
        }
        for (const detail::FsdpBucketSpan& span : detail::fsdp_buckets(keys, params, limit, tied_single_stage)) {
          FsdpBucket b;
          b.params = span.params;
          b.units = static_cast<double>(span.last - span.first + 1);
          b.chunk = part_chunk[begin];
          b.backward_gather = !span.resident;
          b.backward_phase = full_recompute && keys[span.last] >= 0 ? pb::PHASE_RECOMPUTE : pb::PHASE_BACKWARD;
          fsdp_buckets.push_back(b);
        }
        begin = end;
      }
      for (const FsdpBucket& fb : fsdp_buckets) {
        const auto out = detail::fsdp_copy(fb.params, prec.param_bytes);
        fwd.compute_s += rc.copy_seconds(out, pb::PHASE_FORWARD, "fsdp.copy_out");
        fwd.dispatch_s += rc.dispatch_s();
        if (fb.backward_gather) {
          bwd.compute_s += rc.copy_seconds(out, fb.backward_phase, "fsdp.copy_out");
          bwd.dispatch_s += rc.dispatch_s();
        }
        bwd.compute_s += rc.copy_seconds(detail::fsdp_copy(fb.params, prec.grad_bytes), pb::PHASE_BACKWARD, "fsdp.copy_in");
        bwd.dispatch_s += rc.dispatch_s();
      }
    }
    if (!plan.uniform_stages()) {
      // The all-gathers after receiving activations (forward) and gradients (backward).
      std::vector<int64_t> tp_devs;
      for (int64_t r : layout.group(GroupKind::kTp, rank)) tp_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      auto gather = [&](PassCost& pass, double bytes) {
        const double t = rc.blocking_collective(pb::COLLECTIVE_KIND_ALL_GATHER, tp_devs, bytes);
        pass.tp_s += t;
        if (t > 0) pass.dispatch_s += rc.dispatch_s();
      };
      if (p > 0) gather(fwd, fwd_moves[static_cast<size_t>(p - 1)].gather_bytes);
      if (p + 1 < d.pp) gather(bwd, bwd_moves[static_cast<size_t>(p)].gather_bytes);
    }
    s.forward_s = fwd.total();
    s.backward_s = bwd.total();
    s.per_micro_batch = fwd;
    s.per_micro_batch += bwd;
    recompute_flops_rank_sum += s.per_micro_batch.recompute_flops * M * static_cast<double>(plan.stage(p).world_size() / d.pp);

    // Rank skew: a data-parallel group waits for its slowest member at the step's end, after all
    // of the step's compute (ComputeCostModel::skew_wait_s; des: the counter since the rank last
    // waited on the group).
    const double step_compute = M * s.per_micro_batch.compute_s;
    double fsdp_skew = 0;
    // FSDP: each layer's gather (forward and backward) and gradient reduce-scatter, overlapped
    // with neighbouring layers' compute when prefetching.
    if (fsdp) {
      std::vector<int64_t> group_devs;
      for (int64_t r : layout.group(sharding == pb::SHARDING_HSDP ? GroupKind::kDpShard : GroupKind::kDp, rank)) {
        group_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      }
      const double n_units = static_cast<double>(part_params.size());
      const double unit_fwd = n_units > 0 ? s.forward_s / n_units : 0;
      const double unit_bwd = n_units > 0 ? s.backward_s / n_units : 0;
      const bool prefetch = plan.plan.prefetch_buckets() > 0;
      fsdp_skew = rc.skew_wait_s(group_devs.size(), step_compute);
      // Gathers and reduce-scatters share one stream (the lowering's kCommDp), in issue order.
      // Without prefetching each gather is issued when its part is reached and queues behind the
      // reduce-scatter issued just before it: all of them are exposed. Prefetching, a bucket's
      // gather is issued when the bucket before it in the pass is reached, so it travels during
      // that bucket's compute (in backward together with that bucket's reduce-scatter, issued
      // after it); the first gather of each pass (per chunk) has nothing to hide behind, and the
      // last reduce-scatter holds up the next pass's first gather (or the optimizer). What does
      // not fit in its window is exposed; a transfer and the compute beside it slow each other
      // (beside()). A resident bucket has no backward gather; under full recomputation the
      // backward gather comes before the recompute, inside the backward window.
      // Per bucket: its gathers (forward, backward), its reduce-scatter, and its compute windows.
      struct Transfers { double g = 0, gb = 0, rs = 0, fwd = 0, bwd = 0; };
      std::vector<Transfers> c;
      for (const FsdpBucket& fb : fsdp_buckets) {
        const double g = rc.collective(pb::COLLECTIVE_KIND_ALL_GATHER, group_devs, fb.params * prec.param_bytes);
        c.push_back({g, fb.backward_gather ? g : 0,
                     rc.collective(pb::COLLECTIVE_KIND_REDUCE_SCATTER, group_devs, fb.params * prec.grad_bytes),
                     fb.units * unit_fwd, fb.units * unit_bwd});
      }
      const double slow = costs.overlap_slowdown(), slow_comm = costs.overlap_comm_slowdown();
      for (size_t i = 0; i < c.size(); ++i) {
        if (!prefetch) {
          s.fsdp_exposed_s += c[i].g + c[i].gb + c[i].rs;
          continue;
        }
        const bool first = i == 0 || fsdp_buckets[i - 1].chunk != fsdp_buckets[i].chunk;         // in forward
        const bool last = i + 1 == c.size() || fsdp_buckets[i + 1].chunk != fsdp_buckets[i].chunk;  // first in backward
        if (first) {
          s.fsdp_exposed_s += c[i].g + c[i].rs;
        } else {
          s.fsdp_exposed_s += beside(c[i].g, c[i - 1].fwd, slow, slow_comm);
        }
        if (last) {
          s.fsdp_exposed_s += c[i].gb;
        } else {
          // Bucket i's backward gather and bucket i + 1's reduce-scatter, during bucket i + 1's backward.
          s.fsdp_exposed_s += beside(c[i].gb + c[i + 1].rs, c[i + 1].bwd, slow, slow_comm);
        }
      }
    }

    // Data-parallel tail after the last backward.
    const bool overlap = plan.plan.overlap_grad_reduce();
    std::vector<double> buckets;
    std::vector<size_t> bucket_ranks;  // the size of each bucket's group
    if (!fsdp) {
      const auto kind = dist_opt ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE;
      std::vector<int64_t> dense_devs, expert_devs;
      for (int64_t r : layout.group(d.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp, rank)) {
        dense_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      }
      if (plan.model.has_moe()) {
        for (int64_t r : layout.group(GroupKind::kEdp, rank)) expert_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      }
      for (double b : fill_buckets(part_params, false, bucket_params)) {
        buckets.push_back(rc.collective(kind, dense_devs, b * prec.grad_bytes));
        bucket_ranks.push_back(dense_devs.size());
      }
      for (double b : fill_buckets(part_params, true, bucket_params)) {
        buckets.push_back(rc.collective(kind, expert_devs, b * prec.grad_bytes));
        bucket_ranks.push_back(expert_devs.size());
      }
    } else if (sharding == pb::SHARDING_HSDP) {
      std::vector<int64_t> replica_devs;
      for (int64_t r : layout.group(GroupKind::kDpReplica, rank)) replica_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      buckets.push_back(rc.collective(pb::COLLECTIVE_KIND_ALL_REDUCE, replica_devs,
                                      (dense_params + expert_params) / static_cast<double>(plan.plan.shard_group_size()) * prec.grad_bytes));
      bucket_ranks.push_back(replica_devs.size());
    }
    // Each bucket's slowest member launches it late by the skew of the compute it ran before
    // (overlapped: up to its share of the last backward, as dp_tail places it).
    const bool overlapped = overlap && !fsdp;
    std::vector<double> late;
    for (size_t i = 0; i < buckets.size(); ++i) {
      const double share = overlapped ? static_cast<double>(i + 1) / static_cast<double>(buckets.size()) : 1.0;
      const double before = step_compute - (1 - share) * bwd.compute_s;
      late.push_back(rc.skew_wait_s(bucket_ranks[i], before));
    }
    // The reduction under the last backward and that backward's compute slow each other.
    s.dp_exposed_s = dp_tail(buckets, s.backward_s, overlapped, late, costs.overlap_slowdown(),
                             costs.overlap_comm_slowdown()) +
                     fsdp_skew;
    double shard = dense_params + expert_params;
    if (sharding != pb::SHARDING_NONE) {
      shard /= sharding == pb::SHARDING_HSDP ? static_cast<double>(plan.plan.shard_group_size()) : static_cast<double>(sp.degrees.dp);
    }
    const double read = prec.master_param_bytes + prec.grad_bytes + prec.optimizer_state_bytes +
                        (prec.master_param_bytes == 0 ? prec.param_bytes : 0);
    const double written = prec.master_param_bytes + prec.optimizer_state_bytes + prec.param_bytes;
    // Shaped as the lowering's optimizer node ([parameters]), so shape corrections apply alike.
    const int64_t optimizer_shape[] = {static_cast<int64_t>(shard)};
    s.optimizer_s = rc.sharing() * costs.compute().seconds(rc.device(), pb::OP_CLASS_OPTIMIZER, 12.0 * shard,
                                                           shard * (read + written), optimizer_shape,
                                                           pb::PHASE_OPTIMIZER);
    s.optimizer_dispatch_s = rc.dispatch_s();  // the optimizer node, on the compute stream
    if (dist_opt) {
      // Each part's updated weights, as the lowering gathers them (gather_part).
      std::vector<int64_t> dense_devs, expert_devs;
      for (int64_t r : layout.group(d.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp, rank)) dense_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      if (plan.model.has_moe()) {
        for (int64_t r : layout.group(GroupKind::kEdp, rank)) expert_devs.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      }
      // Each gathered part is copied into its parameters on the compute stream (copy_part).
      double gather = 0, copy = 0;
      auto copy_out = [&](double params, size_t members) {
        if (params <= 0 || members < 2) return;
        copy += rc.dispatch_s() + rc.copy_seconds(detail::fsdp_copy(params, prec.param_bytes), pb::PHASE_OPTIMIZER,
                                                  "zero.copy_out");
      };
      for (const auto& [dense_p, expert_p] : part_params) {
        gather += rc.collective(pb::COLLECTIVE_KIND_ALL_GATHER, dense_devs, dense_p * prec.param_bytes);
        gather += rc.collective(pb::COLLECTIVE_KIND_ALL_GATHER, expert_devs, expert_p * prec.param_bytes);
        copy_out(dense_p, dense_devs.size());
        copy_out(expert_p, expert_devs.size());
      }
      // Overlapped with the next step's first forward when asked; otherwise at the step's end,
      // after the optimizer's compute (its skew). The copies are compute either way.
      s.dp_exposed_s += copy + (plan.plan.overlap_param_gather()
                                    ? beside(gather, s.forward_s, costs.overlap_slowdown(), costs.overlap_comm_slowdown())
                                    : gather + rc.skew_wait_s(dense_devs.size(), s.optimizer_s));
    }
  }

  // Pipeline composition. A stage posts each receive when its schedule reaches it (the
  // lowering's receive_posted_after) and a transfer starts once both ends are posted, so every
  // micro-batch's receives lie on its stage's path: recv_s[p] per micro-batch. The fill and the
  // drain cross every boundary once each way: the sum over the stages holds those crossings for
  // 1F1B and GPipe; `hops` adds them to the interleaved formula.
  std::vector<double> recv_s(st.size(), 0.0);
  double hops = 0;
  if (!plan.uniform_stages()) {
    // Each rank's sends run one after another on its send stream and its receives on its
    // receive stream: a boundary takes as long as its busiest rank's serialized transfers.
    auto seconds = [&](const Redistribution& move) {
      std::map<int64_t, double> busy;
      for (const auto& x : move.transfers) {
        const double t = costs.collectives().p2p_seconds(plan.device_of_rank[static_cast<size_t>(x.from)],
                                                         plan.device_of_rank[static_cast<size_t>(x.to)], x.bytes);
        busy[2 * x.from] += t;
        busy[2 * x.to + 1] += t;
      }
      double most = 0;
      for (const auto& [key, t] : busy) most = std::max(most, t);
      return most;
    };
    for (size_t b = 0; b < fwd_moves.size(); ++b) {
      const double act = seconds(fwd_moves[b]), grad = seconds(bwd_moves[b]);
      recv_s[b + 1] += act;
      recv_s[b] += grad;
      hops += act + grad;
    }
  } else if (d.pp > 1) {
    double tokens = static_cast<double>(plan.micro_batch_size * plan.seq_len / d.cp);
    if (plan.sequence_parallel()) tokens /= static_cast<double>(d.tp);
    const double bytes = tokens * static_cast<double>(plan.model.hidden_size()) * prec.activation_bytes;
    auto hop = [&](int64_t from, int64_t to) {
      return costs.collectives().p2p_seconds(plan.device_of_rank[static_cast<size_t>(reps[static_cast<size_t>(from)])],
                                             plan.device_of_rank[static_cast<size_t>(reps[static_cast<size_t>(to)])], bytes);
    };
    for (int64_t p = 0; p < d.pp; ++p) {
      // With vp chunks a stage receives vp activations and vp gradients per micro-batch, less the
      // first chunk's activations on the first stage and the last chunk's gradients on the last.
      const int64_t prev = (p + d.pp - 1) % d.pp, next = (p + 1) % d.pp;
      recv_s[static_cast<size_t>(p)] = static_cast<double>(d.vp - (p == 0 ? 1 : 0)) * hop(prev, p) +
                                       static_cast<double>(d.vp - (p == d.pp - 1 ? 1 : 0)) * hop(next, p);
      if (p + 1 < d.pp) hops += hop(p, p + 1) + hop(p + 1, p);
    }
  }
  double slowest = 0, sum = 0;
  for (size_t p = 0; p < st.size(); ++p) {
    const double mb = st[p].forward_s + st[p].backward_s + st[p].fsdp_exposed_s + recv_s[p];
    sum += mb;
    slowest = std::max(slowest, mb);
  }
  double pipeline;
  if (d.pp == 1) {
    pipeline = M * slowest;
  } else if (plan.schedule() == pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) {
    pipeline = M * slowest + static_cast<double>(d.pp - 1) / static_cast<double>(d.vp) * slowest + hops;
  } else {
    pipeline = (M - 1) * slowest + sum;
  }
  double step = 0;
  for (const auto& s : st) step = std::max(step, pipeline + s.dp_exposed_s + s.optimizer_dispatch_s + s.optimizer_s);
  // The breakdown follows the pipeline rank with the most work of its own; whatever the step
  // holds beyond that rank's work and tail is its bubble, so the terms add up to the step.
  size_t critical = 0;
  double most = -1;
  for (size_t p = 0; p < st.size(); ++p) {
    const auto& s = st[p];
    const double own = M * (s.forward_s + s.backward_s + s.fsdp_exposed_s + recv_s[p]) + s.dp_exposed_s +
                       s.optimizer_dispatch_s + s.optimizer_s;
    if (own > most) most = own, critical = p;
  }

  SimOutput out;
  pb::SimResult& r = out.result;
  r.set_engine("analytic");
  r.set_model(plan.model.name());
  r.set_cluster(plan.cluster.name());
  r.set_step_time_s(step);
  const StageResult& c = st[critical];
  auto* b = r.mutable_breakdown();
  b->set_compute_s(M * c.per_micro_batch.compute_s);
  b->set_recompute_s(M * c.per_micro_batch.recompute_s);
  b->set_optimizer_s(c.optimizer_s);
  b->set_dispatch_s(M * c.per_micro_batch.dispatch_s + c.optimizer_dispatch_s);
  auto add_comm = [&](const char* name, double seconds) {
    if (seconds <= 0) return;
    auto* e = b->add_exposed_comm();
    e->set_name(name);
    e->set_seconds(seconds);
  };
  add_comm("tp", M * c.per_micro_batch.tp_s);
  add_comm("cp", M * c.per_micro_batch.cp_s);
  add_comm("ep", M * c.per_micro_batch.ep_s);
  add_comm("pp", M * recv_s[critical]);
  add_comm("dp", c.dp_exposed_s + M * c.fsdp_exposed_s);
  const double accounted = M * (c.forward_s + c.backward_s + c.fsdp_exposed_s + recv_s[critical]) +
                          c.dp_exposed_s + c.optimizer_dispatch_s + c.optimizer_s;
  b->set_pipeline_bubble_s(std::max(0.0, step - accounted));
  for (auto& m : memory_per_stage(plan)) *r.add_memory() = std::move(m);
  fill_throughput(plan, recompute_flops_rank_sum, r);
  return out;
}

}  // namespace orrery::sim
