// What the analytic engine prices one rank's work with: the time of one pass over a part's ops
// (PassCost, split as the breakdown reports it) by a representative rank of a pipeline stage
// (RankCoster), with the same cost models, per-layer programs and calibrated overheads the des
// engine applies node by node.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "orrery/models/layer_ops.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/cost_models.hpp"

namespace orrery::sim::detail {

using plan::detail::Step;

// The time beyond `window` seconds of compute (alone) that `transfer` seconds of communication
// (alone) launched beside it at its start add, when compute beside communication runs s times
// slower and communication beside compute sc times slower (des: the rank's slowed pstate and
// its transfers' slowed rate). While both run, the compute does t / s of work and the transfer
// t / sc. If the transfer ends first (transfer x sc <= window x s), the compute has lost
// transfer x sc x (1 - 1/s); otherwise the compute ends at window x s, the transfer having done
// window x s / sc, and the rest of it runs alone. With s = sc = 1 this is max(0, transfer -
// window).
inline double beside(double transfer, double window, double s, double sc) {
  if (transfer <= 0) return 0;
  if (transfer * sc <= window * s) return transfer * sc * (1 - 1 / s);
  return transfer - window * s / sc + window * (s - 1);
}

// A GEMM of `n` pieces of `g` seconds pipelined with its TP collective in `n` pieces of `c`
// seconds (tp_comm_overlap; the lowering's overlapped_gemm): an all-gather's piece i must arrive
// before GEMM piece i, a reduce-scatter's piece i follows GEMM piece i. Either way the first
// transfer (or the last GEMM piece) runs alone and the n - 1 pairs between overlap, each taking
// the longer of the two (both slowed while they overlap, s and sc as in beside()):
//   T = c + (n - 1) max(c sc, g s) + g,
// which with s = sc = 1 is max(c + n g, n c + g), the des engine's critical path. Returns what T
// adds to the GEMM's n g: one piece of communication when it is shorter than a GEMM piece,
// else the whole collective less the GEMM's pieces but one (n c - (n - 1) g).
inline double overlapped_exposed(double c, double g, double n, double s, double sc) {
  return c + (n - 1) * std::max(c * sc, g * s) + g - n * g;
}

// Time of one pass over some ops, split the way the breakdown reports it.
struct PassCost {
  double compute_s = 0;
  double recompute_s = 0;  // part of compute_s
  double tp_s = 0, ep_s = 0, cp_s = 0;
  // Parts of compute_s: the decoder layers' attention blocks ("attn." ops) and MLP or MoE blocks
  // ("mlp.", "moe."), the pieces moe_a2a_overlap pairs with the partner's all-to-all.
  double attn_s = 0, mlp_s = 0;
  double dispatch_s = 0;  // the dispatch overhead of the pass's compute-stream ops
  double flops = 0, recompute_flops = 0;
  double total() const { return compute_s + tp_s + ep_s + cp_s + dispatch_s; }
  PassCost& operator+=(const PassCost& o) {
    compute_s += o.compute_s, recompute_s += o.recompute_s, tp_s += o.tp_s, ep_s += o.ep_s;
    attn_s += o.attn_s, mlp_s += o.mlp_s;
    cp_s += o.cp_s, dispatch_s += o.dispatch_s, flops += o.flops,
        recompute_flops += o.recompute_flops;
    return *this;
  }
  PassCost scaled(double k) const {
    PassCost c = *this;
    c.compute_s *= k, c.recompute_s *= k, c.tp_s *= k, c.ep_s *= k, c.cp_s *= k, c.dispatch_s *= k;
    c.attn_s *= k, c.mlp_s *= k;
    c.flops *= k, c.recompute_flops *= k;
    return c;
  }
};

class RankCoster {
 public:
  RankCoster(const plan::ResolvedPlan& plan, const CostModels& costs,
             const plan::RankLayout& layout, int64_t rank)
      : plan_(plan),
        costs_(costs),
        device_(plan::device_of(plan, rank)),
        my_device_(plan.device_of_rank[static_cast<size_t>(rank)]),
        sharing_(costs.host_sharing(plan, rank)) {
    auto devices = [&](plan::GroupKind k) {
      std::vector<int64_t> out;
      for (int64_t r : layout.group(k, rank))
        out.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      return out;
    };
    tp_ = devices(plan::GroupKind::kTp);
    if (plan.degrees.ep > 1) ep_ = devices(plan::GroupKind::kEp);
    if (plan.degrees.folded()) etp_ = devices(plan::GroupKind::kEtp);
    if (plan.degrees.cp > 1) {
      const auto ring = layout.group(plan::GroupKind::kCp, rank);
      const int64_t me = layout.index_in_group(plan::GroupKind::kCp, rank);
      cp_next_ = plan.device_of_rank[static_cast<size_t>(
          ring[static_cast<size_t>((me + 1) % plan.degrees.cp)])];
    }
  }

  // FSDP's copy-in or copy-out (layer_program.hpp), as the lowering's node is costed.
  // `op`: the lowering's ExecNode.op for it ("fsdp.copy_out", "fsdp.copy_in").
  double copy_seconds(const plan::detail::CopyWork& w, pb::Phase phase, std::string_view op) const {
    return sharing_ * costs_.compute().seconds(device_, pb::OP_CLASS_COPY, 0,
                                               w.bytes_read + w.bytes_written, w.shape, phase, op);
  }

  double op_seconds(const models::LayerOp& op, pb::Phase phase, double scale) const {
    const auto w = plan::detail::op_work(op, phase);
    // A scaled op (a CP ring's piece) no longer has the op's shape: no shape corrections.
    return sharing_ * costs_.compute().seconds(device_, op.op_class, w.flops * scale,
                                               (w.bytes_read + w.bytes_written) * scale,
                                               scale == 1.0 ? std::span<const int64_t>(op.shape)
                                                            : std::span<const int64_t>(),
                                               phase, op.name, op.dtype, op.attention_kernel);
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
    auto sync = [&](const std::vector<int64_t>& devs, double& term) {
      if (first_group == nullptr) {
        first_group = &devs, first_term = &term, before_first = since;
      } else {
        term += skew_wait_s(devs.size(), since);
      }
      since = 0;
    };
    for (const Step& s : plan::detail::layer_program(ops, plan_, phase)) {
      switch (s.kind) {
        case Step::Kind::kCompute: {
          const double t = op_seconds(*s.op, s.phase, s.work_fraction);
          const double f = plan::detail::op_work(*s.op, s.phase).flops * s.work_fraction;
          c.compute_s += t;
          add_block(*s.op, t, c);
          c.dispatch_s += dispatch_s();
          c.flops += f;
          since += t;
          if (s.phase == pb::PHASE_RECOMPUTE) c.recompute_s += t, c.recompute_flops += f;
          break;
        }
        case Step::Kind::kRing: {
          const double cp = static_cast<double>(plan_.degrees.cp);
          const double piece = op_seconds(*s.op, s.phase, 1.0 / cp);
          const double exchange =
              costs_.collectives().p2p_seconds(my_device_, cp_next_, s.ring_bytes);
          c.compute_s += cp * piece;
          add_block(*s.op, cp * piece, c);
          c.dispatch_s += cp * dispatch_s();  // one compute node per piece
          since += cp * piece;
          // Each exchange beside a piece: both slowed while they overlap (as in des).
          c.cp_s += (cp - 1) * beside(exchange, piece, costs_.overlap_slowdown(),
                                      costs_.overlap_comm_slowdown());
          const double f = plan::detail::op_work(*s.op, s.phase).flops;
          c.flops += f;
          if (s.phase == pb::PHASE_RECOMPUTE) c.recompute_s += cp * piece, c.recompute_flops += f;
          break;
        }
        case Step::Kind::kOverlapped: {
          // The group meets at the collective's first piece: an all-gather's before the GEMM's
          // pieces, a reduce-scatter's after them.
          const double gemm = overlapped(s, c);
          if (!s.comm_first) since += gemm;
          if (tp_.size() > 1) sync(tp_, c.tp_s);
          if (s.comm_first) since += gemm;
          break;
        }
        case Step::Kind::kCollective: {
          // The folded experts' etp collectives count as expert communication.
          const auto& devs = s.group == Step::Group::kEp    ? ep_
                             : s.group == Step::Group::kEtp ? etp_
                                                            : tp_;
          if (devs.size() < 2) break;
          double& term = s.group == Step::Group::kTp ? c.tp_s : c.ep_s;
          // Issued in line with compute: the calibrated blocking overhead too
          // (collective_cost.hpp).
          term += costs_.collectives().estimate(s.collective, devs, s.bytes).seconds +
                  costs_.collectives().blocking_overhead_s(s.collective, devs);
          sync(devs, term);
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

  // A kOverlapped step (layer_program.hpp): its GEMM's pieces as compute (each a node with its
  // dispatch), what the pipeline exposes of its collective as TP time (overlapped_exposed; on
  // its own stream: no blocking overhead). Returns the GEMM's compute seconds.
  double overlapped(const Step& s, PassCost& c) const {
    const double n = static_cast<double>(s.chunks);
    const double g = op_seconds(*s.op, s.phase, 1.0 / n);
    const double f = plan::detail::op_work(*s.op, s.phase).flops;
    c.compute_s += n * g;
    add_block(*s.op, n * g, c);
    c.dispatch_s += n * dispatch_s();
    c.flops += f;
    if (s.phase == pb::PHASE_RECOMPUTE) c.recompute_s += n * g, c.recompute_flops += f;
    if (tp_.size() > 1) {
      c.tp_s += overlapped_exposed(collective(s.collective, tp_, s.bytes / n), g, n,
                                   costs_.overlap_slowdown(), costs_.overlap_comm_slowdown());
    }
    return n * g;
  }

  // Books `t` seconds of `op` to its block (PassCost::attn_s, mlp_s).
  static void add_block(const models::LayerOp& op, double t, PassCost& c) {
    if (op.name.rfind("attn.", 0) == 0) {
      c.attn_s += t;
    } else if (op.name.rfind("mlp.", 0) == 0 || op.name.rfind("moe.", 0) == 0) {
      c.mlp_s += t;
    }
  }

  double collective(pb::CollectiveKind kind, const std::vector<int64_t>& devs, double bytes) const {
    if (devs.size() < 2 || bytes <= 0) return 0;
    return costs_.collectives().estimate(kind, devs, bytes).seconds;
  }

  // A collective issued in line with compute (on the compute stream): its time plus the
  // calibrated blocking overhead.
  double blocking_collective(pb::CollectiveKind kind, const std::vector<int64_t>& devs,
                             double bytes) const {
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
  const plan::ResolvedPlan& plan_;
  const CostModels& costs_;
  const pb::DeviceSpec& device_;
  int64_t my_device_;
  double sharing_;
  std::vector<int64_t> tp_, ep_, etp_;
  int64_t cp_next_ = -1;
};

inline double params_of(const std::vector<models::LayerOp>& ops, bool expert) {
  double p = 0;
  for (const auto& op : ops) {
    if (plan::is_expert_op(op) == expert) p += op.parameters;
  }
  return p;
}

}  // namespace orrery::sim::detail
