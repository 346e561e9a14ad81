#include "orrery/plan/layer_program.hpp"

#include "orrery/plan/fp8.hpp"

namespace orrery::plan::detail {
namespace {

bool is_block_norm(const models::LayerOp& op) {
  return op.name == "attn.norm" || op.name == "mlp.norm" || op.name == "head.norm";
}

Step collective(std::string name, pb::CollectiveKind kind, double bytes, bool expert = false) {
  Step s;
  s.kind = Step::Kind::kCollective;
  s.name = std::move(name);
  s.collective = kind;
  s.bytes = bytes;
  s.expert_group = expert;
  return s;
}

Step compute(const models::LayerOp& op, pb::Phase phase) {
  Step s;
  s.kind = Step::Kind::kCompute;
  s.op = &op;
  s.phase = phase;
  return s;
}

// One micro-batch's hidden states on this rank in full-sequence layout.
double full_activation_bytes(const ResolvedPlan& p) {
  return static_cast<double>(p.micro_batch_size * p.seq_len / p.degrees.cp) *
         static_cast<double>(p.model.hidden_size()) * p.precision.activation_bytes;
}

void add_core(std::vector<Step>& out, const models::LayerOp& op, const ResolvedPlan& p,
              pb::Phase phase) {
  if (op.cp_kv_bytes > 0 && p.degrees.cp > 1) {
    Step s = compute(op, phase);
    s.kind = Step::Kind::kRing;
    s.ring_bytes = op.cp_kv_bytes * (phase == pb::PHASE_BACKWARD ? 2.0 : 1.0);
    out.push_back(s);
  } else {
    out.push_back(compute(op, phase));
  }
}

}  // namespace

Work op_work(const models::LayerOp& op, pb::Phase phase) {
  const bool backward = phase == pb::PHASE_BACKWARD;
  const double bytes_scale = backward ? 2.0 : 1.0;
  return {
      backward ? op.backward_flops : op.forward_flops,
      op.forward_bytes_read * bytes_scale + (backward ? op.backward_extra_bytes_read : 0),
      op.forward_bytes_written * bytes_scale + (backward ? op.backward_extra_bytes_written : 0)};
}

CopyWork fsdp_copy(double elements, double bytes_per_element) {
  return {
      {static_cast<int64_t>(elements)}, elements * bytes_per_element, elements * bytes_per_element};
}

std::vector<FsdpBucketSpan> fsdp_buckets(const std::vector<int64_t>& keys,
                                         const std::vector<double>& params, double limit,
                                         bool tied_single_stage) {
  std::vector<FsdpBucketSpan> out;
  FsdpBucketSpan b;
  for (size_t i = 0; i < keys.size(); ++i) {
    b.params += params[i];
    if (b.params < limit && i + 1 < keys.size()) continue;
    b.last = i;
    b.resident = tied_single_stage && keys[b.first] == -1 && keys[b.last] != -2;
    out.push_back(b);
    b = FsdpBucketSpan{};
    b.first = i + 1;
  }
  return out;
}

std::vector<Step> layer_program(const std::vector<models::LayerOp>& ops, const ResolvedPlan& p,
                                pb::Phase phase) {
  const bool tp = p.degrees.tp > 1;
  const bool sp = tp && p.sequence_parallel();
  const bool ep = p.degrees.ep > 1;
  const double full = full_activation_bytes(p);
  std::vector<Step> out;
  if (phase != pb::PHASE_BACKWARD) {
    for (const auto& op : ops) {
      if (is_fp8_grad_cast(op)) continue;  // quantizes dY: backward only
      add_core(out, op, p, phase);
      if (sp && is_block_norm(op)) {
        out.push_back(collective(op.name + ".all_gather", pb::COLLECTIVE_KIND_ALL_GATHER, full));
      }
      if (ep && op.ep_alltoall_bytes > 0) {
        out.push_back(collective(op.name + ".all_to_all", pb::COLLECTIVE_KIND_ALL_TO_ALL,
                                 op.ep_alltoall_bytes, true));
      }
      if (tp && op.tp_comm_bytes > 0 && op.name == "head.loss") {
        // The loss's statistics stay all-reduces under SP, two of them as the executor issues
        // them: the maximum (one of the three words per token), then the two sums stacked.
        out.push_back(collective("head.loss.max.all_reduce", pb::COLLECTIVE_KIND_ALL_REDUCE,
                                 op.tp_comm_bytes / 3));
        out.push_back(collective("head.loss.sum.all_reduce", pb::COLLECTIVE_KIND_ALL_REDUCE,
                                 op.tp_comm_bytes * 2 / 3));
      } else if (tp && op.tp_comm_bytes > 0) {
        const bool scatter = sp;
        out.push_back(collective(
            op.name + (scatter ? ".reduce_scatter" : ".all_reduce"),
            scatter ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE,
            op.tp_comm_bytes));
      }
    }
    return out;
  }
  const bool selective = p.recompute() == pb::RECOMPUTE_SELECTIVE;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    const auto& op = *it;
    if (is_fp8_forward_cast(op)) continue;  // quantizes the forward input: forward only
    if (sp && op.tp_comm_bytes > 0 && op.name != "head.loss") {
      out.push_back(collective(op.name + ".grad.all_gather", pb::COLLECTIVE_KIND_ALL_GATHER,
                               op.tp_comm_bytes));
    }
    if (ep && op.ep_alltoall_bytes > 0) {
      out.push_back(collective(op.name + ".grad.all_to_all", pb::COLLECTIVE_KIND_ALL_TO_ALL,
                               op.ep_alltoall_bytes, true));
    }
    if (tp && is_block_norm(op)) {
      out.push_back(collective(
          op.name + (sp ? ".grad.reduce_scatter" : ".grad.all_reduce"),
          sp ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE, full));
    }
    if (selective && op.selective_recompute) add_core(out, op, p, pb::PHASE_RECOMPUTE);
    add_core(out, op, p, pb::PHASE_BACKWARD);
  }
  return out;
}

}  // namespace orrery::plan::detail
