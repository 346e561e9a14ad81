#include "orrery/sim/memory_model.hpp"

#include <algorithm>

#include "orrery/plan/fp8.hpp"
#include "orrery/plan/layer_program.hpp"
#include "orrery/plan/op_sac.hpp"
#include "orrery/plan/op_tables.hpp"
#include "orrery/plan/pipeline_schedule.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::sim {
namespace {

double params_of(const std::vector<models::LayerOp>& ops) {
  double p = 0;
  for (const auto& op : ops) p += op.parameters;
  return p;
}

double expert_params_of(const std::vector<models::LayerOp>& ops) {
  double p = 0;
  for (const auto& op : ops)
    if (plan::is_expert_op(op)) p += op.parameters;
  return p;
}

// Activations one micro-batch leaves for the backward of these ops; `selective`: less what
// recompute selective's modules drop: the attention core's internals (core_attn), each block
// norm's output (layernorm: the tensor the next op kept, as large as the norm's input), the
// routed experts' activation output (moe_act: what their down projection kept) and MLA's query,
// key and value (mla_up_proj: the core's inputs, re-made from the latents the up-projections
// keep). A checkpointed module (mlp, moe, shared_experts) keeps its input alone: the dense MLP's
// and the MoE layer's is the layer-sized `module_input` (none in a parallel block, where the
// attention's projection keeps it), the shared experts' is the router's.
double saved_bytes(const std::vector<models::LayerOp>& ops, const plan::ResolvedPlan& plan,
                   bool selective, double module_input) {
  const auto module = [&](pb::RecomputeModule m) { return selective && plan.recomputes_module(m); };
  const bool core_attn = module(pb::RECOMPUTE_MODULE_CORE_ATTN);
  const bool norms = module(pb::RECOMPUTE_MODULE_LAYERNORM);
  const bool moe_act = module(pb::RECOMPUTE_MODULE_MOE_ACT);
  const bool mla_up = module(pb::RECOMPUTE_MODULE_MLA_UP_PROJ) && plan.model.has_mla();
  const bool mlp = module(pb::RECOMPUTE_MODULE_MLP);
  const bool moe = module(pb::RECOMPUTE_MODULE_MOE);
  const bool shared = module(pb::RECOMPUTE_MODULE_SHARED_EXPERTS);
  const double kept_input = plan.model.parallel_block() ? 0.0 : module_input;
  double bytes = 0;
  bool has_mlp = false, has_moe = false;
  for (const auto& op : ops) {
    bytes += op.saved_activation_bytes;
    if (core_attn) bytes -= op.selective_recompute_bytes;
    if (norms && (op.name == "attn.norm" || op.name == "mlp.norm"))
      bytes -= op.saved_activation_bytes;
    if (moe_act && !moe && op.name == "moe.experts.down") bytes -= op.saved_activation_bytes;
    if (mla_up && op.name == "attn.core")
      bytes -= op.saved_activation_bytes - op.selective_recompute_bytes;
    const bool in_mlp = plan::detail::in_checkpointed_module(op, pb::RECOMPUTE_MODULE_MLP);
    const bool in_moe = plan::detail::in_checkpointed_module(op, pb::RECOMPUTE_MODULE_MOE);
    const bool in_shared =
        plan::detail::in_checkpointed_module(op, pb::RECOMPUTE_MODULE_SHARED_EXPERTS);
    has_mlp = has_mlp || in_mlp;
    has_moe = has_moe || in_moe;
    if ((mlp && in_mlp) || (moe && in_moe) || (shared && !moe && in_shared))
      bytes -= op.saved_activation_bytes;
  }
  if (mlp && has_mlp) bytes += kept_input;
  if (moe && has_moe) bytes += kept_input;
  return bytes;
}

struct Stage {
  double params = 0;               // this rank's shard (after TP/EP), elements
  double expert_params = 0;        // the routed experts' part of params
  double activation_bytes = 0;     // one micro-batch
  double largest_layer_bytes = 0;  // full recomputation: one layer re-materialized at a time
  double largest_layer_params = 0;
  // The largest unit as FSDP gathers it, in compute-dtype elements: its fp8 weights left out
  // under fp8_param_gather (they arrive as the fp8 copy fp8_bytes counts).
  double largest_gathered_params = 0;
  plan::Fp8Footprint fp8;  // fp8 GEMM weights (plan/fp8.hpp)
  double largest_layer_fp8_params = 0;
};

// Op-level selective checkpointing (plan/op_sac.hpp): what a layer's outputs it keeps hold.
double sac_kept_bytes(const plan::ResolvedPlan& plan, const std::vector<models::LayerOp>& ops) {
  double kept = 0;
  for (const auto& split : plan::op_sac_split(ops, plan.model, plan.precision.activation_bytes))
    kept += split.kept_bytes;
  return kept;
}

Stage stage_figures(const plan::ResolvedPlan& plan, const plan::detail::OpTables& t, int64_t s) {
  const pb::Recompute recompute = plan.recompute();
  const bool selective = recompute == pb::RECOMPUTE_SELECTIVE;
  const bool op_sac = recompute == pb::RECOMPUTE_SELECTIVE_OP;
  const int64_t stages = plan.degrees.pp * plan.degrees.vp;
  // A layer's input, which full recomputation keeps (sequence-parallel: this rank's slice).
  double input = static_cast<double>(plan.micro_batch_size * plan.seq_len / plan.degrees.cp) *
                 static_cast<double>(plan.model.hidden_size()) * plan.precision.activation_bytes;
  if (plan.sequence_parallel()) input /= static_cast<double>(plan.degrees.tp);
  Stage st;
  // layer: the decoder layer's index, -1 for the embedding and the head.
  auto add = [&](const std::vector<models::LayerOp>& ops, int64_t layer_index) {
    const bool layer = layer_index >= 0;
    const bool full = layer && plan.recomputes_layer(layer_index);
    const double params = params_of(ops);
    st.params += params;
    st.expert_params += expert_params_of(ops);
    const plan::Fp8Footprint fp8 = plan::fp8_footprint(ops);
    st.fp8.params += fp8.params, st.fp8.gemms += fp8.gemms;
    st.largest_layer_fp8_params = std::max(st.largest_layer_fp8_params, fp8.params);
    const double saved = saved_bytes(ops, plan, selective, input);
    if (full) {
      st.activation_bytes += input;
      st.largest_layer_bytes = std::max(st.largest_layer_bytes, saved);
    } else if (layer && op_sac) {
      // The layer's input and the outputs it kept, until its backward; the backward's re-run
      // then materializes the rest of one layer's activations at a time.
      const double kept = sac_kept_bytes(plan, ops);
      st.activation_bytes += input + kept;
      st.largest_layer_bytes = std::max(st.largest_layer_bytes, std::max(0.0, saved - kept));
    } else {
      st.activation_bytes += saved;
    }
    // FSDP units: decoder layers, and the embedding and head (often the largest).
    st.largest_layer_params = std::max(st.largest_layer_params, params);
    st.largest_gathered_params = std::max(
        st.largest_gathered_params, params - (plan.precision.fp8_param_gather ? fp8.params : 0.0));
  };
  if (s == 0) add(t.embedding, -1);
  const int64_t first = plan.first_layer(s);
  for (int64_t l = first; l < first + plan.layers_per_stage[static_cast<size_t>(s)]; ++l) {
    add(t.layer(plan.model, l), l);
  }
  if (s == stages - 1) add(t.head, -1);
  return st;
}

// An fp8 recipe's weight copies (with their transposes or column-wise blocks and block scales)
// and per-tensor scaling state, kept beside the bf16 weights: for every fp8 weight of the rank,
// or under ZeRO-3/FSDP for the gathered layers in flight only (cast after each gather).
double fp8_bytes(const plan::ResolvedPlan& plan, const Stage& total, bool fsdp) {
  const auto& prec = plan.precision;
  const double copies =
      fsdp ? static_cast<double>(1 + std::max<int64_t>(1, plan.plan.prefetch_buckets())) *
                 total.largest_layer_fp8_params
           : total.fp8.params;
  return copies * plan::fp8_weight_copy_bytes(prec) +
         plan::fp8_scale_state_bytes(prec, total.fp8.gemms);
}

// Pipeline rank p's memory. `plan` is the plan as that stage sees it (ResolvedPlan::for_stage:
// its tp, its dp for ZeRO sharding, its replicas' micro-batch for activations), `t` its ops.
pb::RankMemory stage_memory(const plan::ResolvedPlan& plan, const plan::detail::OpTables& t,
                            const plan::RankLayout& layout, int64_t p) {
  const auto& d = plan.degrees;
  const auto& prec = plan.precision;
  const auto sharding = plan.sharding();
  const bool fsdp = plan::shards_parameters(sharding);
  std::vector<Stage> chunks;
  Stage total;
  for (int64_t c = 0; c < d.vp; ++c) {
    chunks.push_back(stage_figures(plan, t, c * d.pp + p));
    total.params += chunks.back().params;
    total.expert_params += chunks.back().expert_params;
    total.largest_layer_bytes =
        std::max(total.largest_layer_bytes, chunks.back().largest_layer_bytes);
    total.largest_layer_params =
        std::max(total.largest_layer_params, chunks.back().largest_layer_params);
    total.largest_gathered_params =
        std::max(total.largest_gathered_params, chunks.back().largest_gathered_params);
    total.fp8.params += chunks.back().fp8.params, total.fp8.gemms += chunks.back().fp8.gemms;
    total.largest_layer_fp8_params =
        std::max(total.largest_layer_fp8_params, chunks.back().largest_layer_fp8_params);
  }
  // Activations alive at the schedule's worst moment: forwards done, backwards not yet (under
  // moe_a2a_overlap a steady pair's forward allocates before its partner backward frees).
  double live = 0, peak_live = 0;
  for (const auto& step : plan::pipeline_order(
           plan.schedule(), d.pp, d.vp, p, plan.num_micro_batches, plan.plan.moe_a2a_overlap())) {
    const double a = chunks[static_cast<size_t>(step.chunk)].activation_bytes;
    live += step.forward ? a : -a;
    peak_live = std::max(peak_live, live);
  }
  pb::RankMemory m;
  const int64_t rank = layout.rank({0, 0, 0, p});
  m.set_rank(rank);
  // What this rank keeps of sharded state: dense and expert weights are sharded over different
  // groups (ResolvedPlan::dense_shard_degree, expert_shard_degree; both 1 without sharding).
  const double dense = total.params - total.expert_params;
  const double kept = dense / static_cast<double>(plan.dense_shard_degree()) +
                      total.expert_params / static_cast<double>(plan.expert_shard_degree());
  double param_bytes = total.params * prec.param_bytes;
  double grad_bytes = total.params * prec.grad_bytes;
  const double optimizer_bytes = kept * (prec.master_param_bytes + prec.optimizer_state_bytes);
  if (sharding == pb::SHARDING_ZERO2 || fsdp) grad_bytes = kept * prec.grad_bytes;
  if (fsdp) {
    // Sharded weights, plus the gathered layers in flight (current + prefetched) and one
    // layer's full gradients before its reduce-scatter.
    const double in_flight =
        static_cast<double>(1 + std::max<int64_t>(1, plan.plan.prefetch_buckets()));
    param_bytes =
        kept * prec.param_bytes + in_flight * total.largest_gathered_params * prec.param_bytes;
    grad_bytes += total.largest_layer_params * prec.grad_bytes;
  }
  param_bytes += fp8_bytes(plan, total, fsdp);
  const double activations = peak_live + total.largest_layer_bytes;
  // Pipeline send/receive buffers (two per direction) and, for DDP, the gradient buckets are
  // the gradients themselves; the rest is the runtime's fixed share.
  double tokens = static_cast<double>(plan.micro_batch_size * plan.seq_len / d.cp);
  if (plan.sequence_parallel()) tokens /= static_cast<double>(d.tp);
  const double p2p =
      d.pp > 1 ? 4 * tokens * static_cast<double>(plan.model.hidden_size()) * prec.activation_bytes
               : 0;
  const pb::DeviceSpec& device = plan::device_of(plan, rank);
  const double runtime = device.kind() == pb::DEVICE_KIND_GPU ? kGpuRuntimeBytes : 0;
  m.set_parameters_bytes(param_bytes);
  m.set_gradients_bytes(grad_bytes);
  m.set_optimizer_bytes(optimizer_bytes);
  m.set_activations_bytes(activations);
  m.set_comm_buffers_bytes(p2p);
  m.set_allocator_overhead_bytes(runtime + kAllocatorFragmentation * activations);
  const double peak =
      param_bytes + grad_bytes + optimizer_bytes + activations + p2p + m.allocator_overhead_bytes();
  m.set_peak_bytes(peak);
  m.set_capacity_bytes(device.memory_bytes());
  m.set_oom(peak > device.memory_bytes());
  return m;
}

}  // namespace

std::vector<pb::RankMemory> memory_per_stage(const plan::ResolvedPlan& plan) {
  const plan::RankLayout layout = plan::rank_layout(plan);
  std::vector<pb::RankMemory> out;
  if (plan.uniform_stages()) {
    const auto t = plan::detail::make_op_tables(plan);
    for (int64_t p = 0; p < plan.degrees.pp; ++p) out.push_back(stage_memory(plan, t, layout, p));
    return out;
  }
  for (int64_t p = 0; p < plan.degrees.pp; ++p) {
    const plan::ResolvedPlan stage = plan.for_stage(p);
    out.push_back(stage_memory(stage, plan::detail::make_op_tables(stage), layout, p));
  }
  return out;
}

}  // namespace orrery::sim
