#include "orrery/plan/layer_program.hpp"

#include <algorithm>

#include "orrery/plan/fp8.hpp"
#include "orrery/plan/op_sac.hpp"

namespace orrery::plan::detail {
namespace {

bool is_block_norm(const models::LayerOp& op) {
  return op.name == "attn.norm" || op.name == "mlp.norm" || op.name == "head.norm";
}

Step collective(std::string name, pb::CollectiveKind kind, double bytes,
                Step::Group group = Step::Group::kTp) {
  Step s;
  s.kind = Step::Kind::kCollective;
  s.name = std::move(name);
  s.collective = kind;
  s.bytes = bytes;
  s.group = group;
  return s;
}

// Folded MoE layers without shared experts feed the router the rank's own sequence-parallel
// tokens: nothing gathers them after mlp.norm (nor reduces them in backward).
bool gathers_after(const models::LayerOp& op, const std::vector<models::LayerOp>& ops,
                   const ResolvedPlan& p) {
  if (!is_block_norm(op)) return false;
  if (op.name != "mlp.norm" || !p.degrees.folded()) return true;
  const auto has = [&](const char* prefix) {
    return std::any_of(ops.begin(), ops.end(),
                       [&](const models::LayerOp& o) { return o.name.rfind(prefix, 0) == 0; });
  };
  return !has("moe.router") || has("moe.shared");
}

// The expert collectives around one op, in forward order: the dispatch all-to-all then the etp
// all-gather after the router; the etp reduce-scatter then the combine all-to-all after the
// routed experts' down projection. Backward runs their mirrors in reverse.
std::vector<Step> expert_collectives(const models::LayerOp& op, bool backward) {
  std::vector<Step> out;
  const bool router = op.op_class == pb::OP_CLASS_ROUTER;
  const std::string grad = backward ? ".grad" : "";
  auto a2a = [&] {
    if (op.ep_alltoall_bytes > 0)
      out.push_back(collective(op.name + grad + ".all_to_all", pb::COLLECTIVE_KIND_ALL_TO_ALL,
                               op.ep_alltoall_bytes, Step::Group::kEp));
  };
  auto etp = [&](bool gather) {
    if (op.etp_comm_bytes <= 0) return;
    out.push_back(
        collective(op.name + grad + (gather ? ".etp.all_gather" : ".etp.reduce_scatter"),
                   gather ? pb::COLLECTIVE_KIND_ALL_GATHER : pb::COLLECTIVE_KIND_REDUCE_SCATTER,
                   op.etp_comm_bytes, Step::Group::kEtp));
  };
  if (!backward) {
    if (router) a2a(), etp(true);
    if (!router) etp(false), a2a();
  } else {
    if (router) etp(false), a2a();  // the all-gather's mirror, then the dispatch's
    if (!router) a2a(), etp(true);
  }
  return out;
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

// Op-level selective checkpointing: the part of an op's forward the backward re-runs, just
// before the op's backward (fp8 casts of the forward input re-run with their GEMM's forward).
void add_sac_recompute(std::vector<Step>& out, const models::LayerOp& op, const OpSacSplit& split,
                       const ResolvedPlan& p) {
  if (split.recompute_fraction <= 0 || is_fp8_forward_cast(op)) return;
  const size_t at = out.size();
  add_core(out, op, p, pb::PHASE_RECOMPUTE);
  out[at].work_fraction = split.recompute_fraction;
}

// A GEMM of a decoder layer's dense part: what userbuffers pipelines its TP collectives with
// (Megatron-core gives the experts, the router and the output layer none).
bool overlappable_gemm(const Step& s) {
  if (s.kind != Step::Kind::kCompute || s.op->op_class != pb::OP_CLASS_GEMM) return false;
  return s.op->name.rfind("moe.", 0) != 0 && s.op->name.rfind("head.", 0) != 0;
}

// tp_comm_overlap: each TP all-gather merged with the GEMM after it, each TP reduce-scatter with
// the GEMM before it (the column-parallel GEMM consumes the gathered input; the row-parallel
// GEMM produces what is scattered; in backward the same pairs mirrored).
std::vector<Step> overlap_tp(const std::vector<Step>& in, int64_t chunks) {
  std::vector<Step> out;
  for (size_t i = 0; i < in.size(); ++i) {
    const Step& s = in[i];
    const bool tp = s.kind == Step::Kind::kCollective && s.group == Step::Group::kTp;
    const bool gather = tp && s.collective == pb::COLLECTIVE_KIND_ALL_GATHER;
    const bool scatter = tp && s.collective == pb::COLLECTIVE_KIND_REDUCE_SCATTER;
    Step* gemm = gather && i + 1 < in.size() && overlappable_gemm(in[i + 1])
                     ? &out.emplace_back(in[++i])
                 : scatter && !out.empty() && overlappable_gemm(out.back()) ? &out.back()
                                                                            : nullptr;
    if (gemm == nullptr) {
      out.push_back(s);
      continue;
    }
    gemm->kind = Step::Kind::kOverlapped;
    gemm->collective = s.collective;
    gemm->bytes = s.bytes;
    gemm->name = s.name;
    gemm->chunks = chunks;
    gemm->comm_first = gather;
  }
  return out;
}

// moe_expert_gemm per_expert (Megatron-core's SequentialMLP): every kernel of the routed experts
// (up, activation, down, and an fp8 recipe's casts) runs once per local expert on that expert's
// share of the pairs, so each piece pays its own overhead and sits lower on the efficiency curve.
// The pieces are equal: moe_imbalance and the capacity describe the rank, not its experts.
std::vector<Step> per_expert_kernels(const std::vector<Step>& in, int64_t experts) {
  std::vector<Step> out;
  for (const Step& s : in) {
    if (s.kind != Step::Kind::kCompute || s.op->name.rfind("moe.experts.", 0) != 0) {
      out.push_back(s);
      continue;
    }
    for (int64_t e = 0; e < experts; ++e) {
      Step piece = s;
      piece.work_fraction = s.work_fraction / static_cast<double>(experts);
      piece.name = ".expert" + std::to_string(e);
      out.push_back(std::move(piece));
    }
  }
  return out;
}

// One op's forward as the program runs it: its compute (`phase`: forward, or recompute when a
// checkpointed module re-runs it), then the collectives that follow it.
void add_forward(std::vector<Step>& out, const std::vector<models::LayerOp>& ops, size_t i,
                 const ResolvedPlan& p, pb::Phase phase) {
  const models::LayerOp& op = ops[i];
  if (is_fp8_grad_cast(op)) return;  // quantizes dY: backward only
  const bool tp = p.degrees.tp > 1;
  const bool sp = tp && p.sequence_parallel();
  add_core(out, op, p, phase);
  if (sp && gathers_after(op, ops, p)) {
    out.push_back(collective(op.name + ".all_gather", pb::COLLECTIVE_KIND_ALL_GATHER,
                             full_activation_bytes(p)));
  }
  if (p.degrees.ep > 1 || op.etp_comm_bytes > 0) {
    for (auto& s : expert_collectives(op, false)) out.push_back(std::move(s));
  }
  if (tp && op.tp_comm_bytes > 0 && op.name == "head.loss") {
    // The loss's statistics stay all-reduces under SP, two of them as the executor issues
    // them: the maximum (one of the three words per token), then the two sums stacked.
    out.push_back(collective("head.loss.max.all_reduce", pb::COLLECTIVE_KIND_ALL_REDUCE,
                             op.tp_comm_bytes / 3));
    out.push_back(collective("head.loss.sum.all_reduce", pb::COLLECTIVE_KIND_ALL_REDUCE,
                             op.tp_comm_bytes * 2 / 3));
  } else if (tp && op.tp_comm_bytes > 0) {
    out.push_back(
        collective(op.name + (sp ? ".reduce_scatter" : ".all_reduce"),
                   sp ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE,
                   op.tp_comm_bytes));
  }
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Megatron-core's checkpointed modules (tensor_parallel.checkpoint: the module's input kept,
// its whole forward re-run when the backward reaches its output): `mlp` the dense MLP
// (transformer_layer.py, not in MoE layers), `moe` the MoE layer (moe_layer.py: router,
// dispatch, shared and routed experts, combine), `shared_experts` the shared experts alone.
// Each as the [first, last] range of its ops in this layer.
std::vector<std::pair<size_t, size_t>> checkpointed_modules(const std::vector<models::LayerOp>& ops,
                                                            const ResolvedPlan& p) {
  std::vector<std::pair<size_t, size_t>> out;
  const auto add = [&](const auto& in_module) {
    size_t first = ops.size(), last = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!in_module(ops[i])) continue;
      first = std::min(first, i);
      last = i;
    }
    if (first < ops.size()) out.emplace_back(first, last);
  };
  const auto module = [&](pb::RecomputeModule m) {
    add([m](const models::LayerOp& o) { return in_checkpointed_module(o, m); });
  };
  if (p.recomputes_module(pb::RECOMPUTE_MODULE_MLP)) module(pb::RECOMPUTE_MODULE_MLP);
  if (p.recomputes_module(pb::RECOMPUTE_MODULE_MOE)) {
    module(pb::RECOMPUTE_MODULE_MOE);
  } else if (p.recomputes_module(pb::RECOMPUTE_MODULE_SHARED_EXPERTS)) {
    module(pb::RECOMPUTE_MODULE_SHARED_EXPERTS);
  }
  return out;
}

// A checkpointed module's re-run: the sequence-parallel gather of its input where the norm
// before it gathers (the module's first column-parallel GEMM gathers again), then its ops'
// forward with their collectives, all in the recompute phase (named "rcp" in the graph, as the
// executor names what it re-runs).
void add_module_rerun(std::vector<Step>& out, const std::vector<models::LayerOp>& ops,
                      std::pair<size_t, size_t> range, const ResolvedPlan& p) {
  const auto [first, last] = range;
  const size_t begin = out.size();
  const bool sp = p.degrees.tp > 1 && p.sequence_parallel();
  if (sp && first > 0 && gathers_after(ops[first - 1], ops, p)) {
    out.push_back(collective(ops[first - 1].name + ".all_gather", pb::COLLECTIVE_KIND_ALL_GATHER,
                             full_activation_bytes(p)));
  }
  for (size_t i = first; i <= last; ++i) add_forward(out, ops, i, p, pb::PHASE_RECOMPUTE);
  for (size_t i = begin; i < out.size(); ++i) out[i].phase = pb::PHASE_RECOMPUTE;
}

std::vector<Step> program(const std::vector<models::LayerOp>& ops, const ResolvedPlan& p,
                          pb::Phase phase);

}  // namespace

bool in_checkpointed_module(const models::LayerOp& op, pb::RecomputeModule module) {
  switch (module) {
    case pb::RECOMPUTE_MODULE_MLP:
      return starts_with(op.name, "mlp.") && op.name != "mlp.norm" && op.name != "mlp.residual" &&
             op.name != "mlp.post_norm";
    case pb::RECOMPUTE_MODULE_MOE:
      return starts_with(op.name, "moe.");
    case pb::RECOMPUTE_MODULE_SHARED_EXPERTS:
      return starts_with(op.name, "moe.shared.");
    default:
      return false;
  }
}

std::vector<std::vector<const models::LayerOp*>> module_reruns(
    const std::vector<models::LayerOp>& ops, const ResolvedPlan& p) {
  std::vector<std::vector<const models::LayerOp*>> out(ops.size());
  // layernorm: a block norm's output is needed again by the backward of its block's ops; the
  // backward reaches the block at its last op (Megatron registers the re-run on the block's
  // output gradient), so the norm re-runs just before that op's backward.
  if (p.recomputes_module(pb::RECOMPUTE_MODULE_LAYERNORM)) {
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!is_block_norm(ops[i]) || ops[i].name == "head.norm") continue;
      size_t last = i + 1;
      while (last + 1 < ops.size() && !is_block_norm(ops[last + 1])) ++last;
      if (last < ops.size()) out[last].push_back(&ops[i]);
    }
  }
  // moe_act: the routed experts' activation re-runs before their down projection's backward,
  // which reads its output.
  if (p.recomputes_module(pb::RECOMPUTE_MODULE_MOE_ACT)) {
    const auto named = [&](const char* name) {
      return std::find_if(ops.begin(), ops.end(),
                          [&](const models::LayerOp& o) { return o.name == name; });
    };
    const auto act = named("moe.experts.act"), down = named("moe.experts.down");
    if (act != ops.end() && down != ops.end())
      out[static_cast<size_t>(down - ops.begin())].push_back(&*act);
  }
  // mla_up_proj: the query and key/value up-projections (the query projection where there is
  // no query latent) and the rotary embedding re-run before the attention core's backward
  // (Megatron registers it on the core's output gradient), with their fp8 input casts.
  if (p.recomputes_module(pb::RECOMPUTE_MODULE_MLA_UP_PROJ) && p.model.has_mla()) {
    const auto core = std::find_if(ops.begin(), ops.end(),
                                   [](const models::LayerOp& o) { return o.name == "attn.core"; });
    for (const auto& o : ops) {
      if (core == ops.end() || is_fp8_grad_cast(o)) continue;
      const bool up = starts_with(o.name, "attn.q_up") || starts_with(o.name, "attn.kv_up") ||
                      o.name == "attn.q" || starts_with(o.name, "attn.q.") || o.name == "attn.rope";
      if (up) out[static_cast<size_t>(core - ops.begin())].push_back(&o);
    }
  }
  return out;
}

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
  std::vector<Step> steps = program(ops, p, phase);
  const int64_t local_experts = p.model.has_moe() ? p.model.moe().num_experts() / p.degrees.ep : 1;
  if (p.plan.moe_expert_gemm() == pb::MOE_EXPERT_GEMM_PER_EXPERT && local_experts > 1)
    steps = per_expert_kernels(steps, local_experts);
  if (!p.plan.tp_comm_overlap() || p.degrees.tp < 2) return steps;
  return overlap_tp(steps, p.plan.tp_comm_overlap_chunks());
}

namespace {

std::vector<Step> program(const std::vector<models::LayerOp>& ops, const ResolvedPlan& p,
                          pb::Phase phase) {
  const bool tp = p.degrees.tp > 1;
  const bool sp = tp && p.sequence_parallel();
  const bool ep = p.degrees.ep > 1;
  const double full = full_activation_bytes(p);
  std::vector<Step> out;
  if (phase != pb::PHASE_BACKWARD) {
    for (size_t i = 0; i < ops.size(); ++i) add_forward(out, ops, i, p, phase);
    return out;
  }
  const bool core_attn = p.recomputes_module(pb::RECOMPUTE_MODULE_CORE_ATTN);
  const bool decoder = !ops.empty() && in_decoder_layer(ops[0]);
  // Op-level selective checkpointing re-runs a decoder layer's forward, but for what it kept.
  std::vector<OpSacSplit> sac;
  if (p.recompute() == pb::RECOMPUTE_SELECTIVE_OP && decoder)
    sac = op_sac_split(ops, p.model, p.precision.activation_bytes);
  // Megatron's output-discarding modules: what each op's backward needs re-run first.
  const auto rerun = decoder ? module_reruns(ops, p)
                             : std::vector<std::vector<const models::LayerOp*>>(ops.size());
  const auto modules =
      decoder ? checkpointed_modules(ops, p) : std::vector<std::pair<size_t, size_t>>{};
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    const auto& op = *it;
    const auto index = static_cast<size_t>(ops.rend() - it - 1);
    if (!sac.empty()) add_sac_recompute(out, op, sac[index], p);
    for (const auto& range : modules) {
      if (range.second == index) add_module_rerun(out, ops, range, p);
    }
    for (const models::LayerOp* again : rerun[index]) add_core(out, *again, p, pb::PHASE_RECOMPUTE);
    if (is_fp8_forward_cast(op)) continue;  // quantizes the forward input: forward only
    if (sp && op.tp_comm_bytes > 0 && op.name != "head.loss") {
      out.push_back(collective(op.name + ".grad.all_gather", pb::COLLECTIVE_KIND_ALL_GATHER,
                               op.tp_comm_bytes));
    }
    if (ep || op.etp_comm_bytes > 0) {
      for (auto& s : expert_collectives(op, true)) out.push_back(std::move(s));
    }
    if (tp && gathers_after(op, ops, p)) {
      out.push_back(collective(
          op.name + (sp ? ".grad.reduce_scatter" : ".grad.all_reduce"),
          sp ? pb::COLLECTIVE_KIND_REDUCE_SCATTER : pb::COLLECTIVE_KIND_ALL_REDUCE, full));
    }
    if (core_attn && op.selective_recompute) add_core(out, op, p, pb::PHASE_RECOMPUTE);
    add_core(out, op, p, pb::PHASE_BACKWARD);
  }
  return out;
}

}  // namespace

}  // namespace orrery::plan::detail
