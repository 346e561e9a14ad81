#include <cctype>
#include <string>
#include <utility>

#include "orrery/executor/train_config.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/recomputed_layers.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::executor {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// An enum value as plan files spell it: "fp8" for PRECISION_FP8.
std::string lower_name(const std::string& full, size_t prefix) {
  std::string name = full.substr(prefix);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

// fp32, bf16 mixed precision (mixed_precision.hpp) with every parallelism the executor runs:
// bf16 activations cross ranks as the lowering's activation_bytes 2 say (Gloo 1.13's missing bf16
// support worked around, mixed_precision.hpp), gradients are reduced in fp32 and ZeRO/FSDP gather
// bf16 copies of fp32 masters (parallel_sharding.hpp); or fp16 with dynamic loss scaling
// (loss_scaler.hpp; on a CPU its GEMMs run in fp32, docs/executor.md).
std::string precision_problem(const TrainConfig& c) {
  const auto precision = c.plan.job().precision();
  if (precision == pb::PRECISION_FP32 || precision == pb::PRECISION_BF16) return "";
  if (precision == pb::PRECISION_FP16) {
    const auto& s = c.loss_scaling;
    if (!(s.init_scale > 0) || !(s.growth_factor > 1) || !(s.backoff_factor > 0) ||
        !(s.backoff_factor < 1) || s.growth_interval < 1) {
      return "job.precision fp16: the loss scaling needs an initial scale > 0, a growth factor > "
             "1, a backoff factor in (0, 1) and a growth interval >= 1";
    }
    return "";
  }
  return "job.precision " + lower_name(pb::Precision_Name(precision), 10) +
         ": not implemented in the executor (fp32, bf16 and fp16 are)";
}

// Interleaved 1F1B (pipeline.hpp) runs with pp > 1 and every sharding but FSDP/ZeRO-3.
std::string virtual_stage_problem(const pb::Plan& plan) {
  const int64_t vp = plan::degrees_of(plan.parallel()).vp;
  if (vp < 2) return "";
  const std::string name = "parallel.vp " + str(vp);
  if (plan::degrees_of(plan.parallel()).pp < 2) {
    return name +
           " with pp 1: every virtual stage on one rank, whose activations would be sent to the "
           "rank itself; not implemented in the executor (vp with pp >= 2 is)";
  }
  if (plan::shards_parameters(plan.sharding())) {
    return name +
           " with sharding zero3/fsdp/hsdp: the lowering buckets FSDP parameters per model chunk, "
           "the "
           "executor over the whole stage; not implemented in the executor yet";
  }
  return "";
}

std::string plan_problem(const pb::Plan& plan) {
  if (auto v = virtual_stage_problem(plan); !v.empty()) return v;
  if (plan.stage_tp_size() > 0 || plan.stage_dp_size() > 0) {
    return "stage_tp/stage_dp: per-stage tensor- and data-parallel degrees are not implemented in "
           "the executor yet "
           "(every stage uses parallel.tp and parallel.dp)";
  }
  for (const int m : plan.recompute_modules()) {
    // Megatron's core_attn, its checkpointed modules (mlp, moe, shared_experts) and the
    // output-discarding layernorm and moe_act (discard_output.hpp) are the executor's selective
    // recomputation; mla_up_proj is not (MLA is not either), nor layernorm around a parallel
    // block's shared norm, nor moe_act inside a checkpointed MoE layer.
    if (m == pb::RECOMPUTE_MODULE_MLA_UP_PROJ) {
      return "recompute_modules mla_up_proj: Megatron-core's output-discarding recomputation of "
             "it is simulated, not run by the executor yet (core_attn, mlp, moe, shared_experts, "
             "layernorm and moe_act are)";
    }
    if (m == pb::RECOMPUTE_MODULE_MOE_ACT &&
        plan::recomputes_module(plan, pb::RECOMPUTE_MODULE_MOE)) {
      return "recompute_modules moe_act with moe: the activation inside a checkpointed MoE layer "
             "is not discarded by the executor yet (either alone is)";
    }
  }
  if (plan.sharding() == pb::SHARDING_HSDP && plan.shard_group_size() == 1) {
    // The lowering then has no FSDP collectives at all, only the replica all-reduce of whole
    // gradients; the planner never proposes it (its shard groups are 2 ..dp/2).
    return "sharding hsdp with shard_group_size 1: shards of one rank are plain data "
           "parallelism; not implemented in the executor (use sharding none, or a shard group of "
           "2 or more)";
  }
  // overlap_grad_reduce and overlap_param_gather run as the lowering models them
  // (parallel_sharding.hpp).
  if (plan.tp_comm_overlap()) {
    return "tp_comm_overlap: TP collectives pipelined with their GEMMs in chunks are not "
           "implemented in the executor yet";
  }
  // grad_reduce_dtype bf16 runs: the data-parallel reductions carry bf16 copies of the gradients
  // and sum them in fp32 (sharding_flat.hpp).
  if (plan.parallel().has_etp()) {
    return "parallel.etp: MoE parallel folding (expert tensor parallelism) is simulated, not "
           "implemented in the executor yet";
  }
  if (plan.moe_dispatcher() == pb::MOE_DISPATCHER_DEEPEP) {
    // The executor's dispatch is one all-to-all per direction over the process group (Gloo or
    // NCCL); DeepEP's node-deduplicating kernels are a separate library.
    return "moe_dispatcher deepep: DeepEP's dispatch kernels are simulated, not run by the "
           "executor (alltoall is)";
  }
  if (plan.moe_a2a_overlap()) {
    // The executor runs each pass alone, its all-to-alls in line; the merged pairs that hide
    // them are the simulator's (plan/src/lower_layer.cpp, merged_layer).
    return "moe_a2a_overlap: the merged forward/backward pairs are simulated, not run by the "
           "executor (each pass runs alone, its all-to-alls in line)";
  }
  return "";
}

std::string model_problem(const pb::ModelSpec& m) {
  if (m.has_mla())
    return "model " + m.name() +
           ": multi-head latent attention is not implemented in the executor yet";
  if (m.hidden_dropout() > 0)
    return "model " + m.name() + ": hidden_dropout > 0 is not implemented in the executor yet";
  if (m.has_rotary_fraction() && m.rotary_fraction() != 1.0 &&
      m.position_embedding() == pb::POSITION_EMBEDDING_ROPE) {
    // Rotate-half pairs dimension i with i + rotated / 2 (layer_ops truncates the count too).
    const auto rotated =
        static_cast<int64_t>(static_cast<double>(models::head_dim(m)) * m.rotary_fraction());
    if (rotated % 2 != 0) {
      return "model " + m.name() + ": rotary_fraction " + std::to_string(m.rotary_fraction()) +
             " rotates " + str(rotated) +
             " dimensions of each head; rotary embeddings need an even number";
    }
  }
  // ALiBi, sliding windows, soft-capping, post-block norms and the parallel block run
  // (model_transformer.cpp, attention_math.hpp); a parallel block around MoE layers does not.
  if (m.parallel_block() && m.has_moe())
    return "model " + m.name() +
           ": parallel_block with MoE layers is not implemented in the executor yet (the dense "
           "parallel block is)";
  return "";
}

// ZeRO-3/FSDP (parallel_sharding.hpp) gathers and reduces each part's flat chunks over dp (HSDP
// over its shard group).
std::string sharding_problem(const pb::Plan& plan, const pb::ModelSpec& m) {
  const auto s = plan.sharding();
  if (s != pb::SHARDING_ZERO3 && s != pb::SHARDING_FSDP && s != pb::SHARDING_HSDP) return "";
  const std::string name = "sharding " + lower_name(pb::Sharding_Name(s), 9);
  // recompute full runs: a bucket whose last part is a recomputed layer is gathered for that
  // layer's recomputation, as the lowering has it (sharding_fsdp.hpp, model_transformer.cpp).
  const auto [pp, ep] =
      std::pair(plan::degrees_of(plan.parallel()).pp, plan::degrees_of(plan.parallel()).ep);
  if (pp > 1 && m.tied_embeddings()) {
    return name +
           " with pp > 1 and tied embeddings: the two stages' copies of the embedding matrix would "
           "be "
           "reduced in different FSDP buckets; not implemented in the executor yet";
  }
  if (ep > 1) {
    return name +
           " with ep > 1: routed experts differ across dp and cannot be sharded over it; not "
           "implemented in "
           "the executor yet";
  }
  return "";
}

}  // namespace

std::string unsupported_reason(const TrainConfig& c) {
  if (auto p = plan_problem(c.plan); !p.empty()) return p;
  if (auto p = precision_problem(c); !p.empty()) return p;
  if (auto p = model_problem(c.model); !p.empty()) return p;
  if (c.model.parallel_block() && plan::recomputes_module(c.plan, pb::RECOMPUTE_MODULE_LAYERNORM)) {
    return "recompute_modules layernorm with model " + c.model.name() +
           "'s parallel block: the norm both branches read is not discarded by the executor yet";
  }
  // The plan's rules (degrees against the model, batch, sequence, pipeline split, MoE), worded
  // as `simulate` and `plan` word them: one copy, in plan/. (The executor places EP groups inside
  // the dp x cp plane as the plan's layout does; the plan's ep-divides-dp-cp is that rule.)
  if (auto p = plan::rule_violation(c.plan, c.model); !p.empty()) return p;
  if (auto p = sharding_problem(c.plan, c.model); !p.empty()) return p;
  if (c.steps < 1) return "steps must be at least 1";
  return "";
}

std::vector<int64_t> layers_per_stage(const pb::Plan& plan, const pb::ModelSpec& model) {
  const auto d = plan::degrees_of(plan.parallel());
  const int64_t stages = d.pp * d.vp;
  if (plan.layers_per_stage_size() > 0)
    return {plan.layers_per_stage().begin(), plan.layers_per_stage().end()};
  return std::vector<int64_t>(static_cast<size_t>(stages), model.num_layers() / stages);
}

}  // namespace orrery::executor
