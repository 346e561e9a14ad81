#include <cctype>
#include <string>
#include <utility>

#include "orrery/executor/train_config.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::executor {
// Pipeline split rules (below).
std::string stage_problem(const pb::Plan& plan, const pb::ModelSpec& m);

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// An enum value as plan files spell it: "fp8" for PRECISION_FP8.
std::string lower_name(const std::string& full, size_t prefix) {
  std::string name = full.substr(prefix);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

// fp32, or bf16 mixed precision (mixed_precision.hpp) with every parallelism the executor runs:
// bf16 activations cross ranks as the lowering's activation_bytes 2 say (Gloo 1.13's missing bf16
// support worked around, mixed_precision.hpp), gradients are reduced in fp32 and ZeRO/FSDP gather
// bf16 copies of fp32 masters (parallel_sharding.hpp). fp16 needs loss scaling (and libtorch
// 1.13's CPU autocast has no fp16).
std::string precision_problem(const pb::Plan& plan) {
  const auto precision = plan.job().precision();
  if (precision == pb::PRECISION_FP32 || precision == pb::PRECISION_BF16) return "";
  if (precision == pb::PRECISION_FP16) {
    return "job.precision fp16: needs loss scaling, not implemented in the executor yet (fp32 and "
           "bf16 are)";
  }
  return "job.precision " + lower_name(pb::Precision_Name(precision), 10) +
         ": not implemented in the executor (fp32 and bf16 are)";
}

std::string plan_problem(const pb::Plan& plan) {
  const auto& p = plan.parallel();
  if (p.cp() > 1)
    return "parallel.cp " + str(p.cp()) +
           ": context parallelism is not implemented in the executor yet";
  if (p.vp() > 1)
    return "parallel.vp " + str(p.vp()) +
           ": virtual pipeline stages are not implemented in the executor yet";
  if (p.schedule() == pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) {
    return "parallel.schedule interleaved_1f1b: not implemented in the executor yet (gpipe and "
           "1f1b are)";
  }
  if (plan.stage_tp_size() > 0 || plan.stage_dp_size() > 0) {
    return "stage_tp/stage_dp: per-stage tensor- and data-parallel degrees are not implemented in "
           "the executor yet "
           "(every stage uses parallel.tp and parallel.dp)";
  }
  if (plan.sharding() == pb::SHARDING_HSDP) {
    return "sharding hsdp: shard and replica groups are not implemented in the executor yet (none, "
           "zero1, zero2, "
           "zero3 and fsdp are)";
  }
  if (plan.recompute() != pb::RECOMPUTE_UNSPECIFIED && plan.recompute() != pb::RECOMPUTE_NONE) {
    return "recompute " + pb::Recompute_Name(plan.recompute()) +
           ": not implemented in the executor yet";
  }
  // overlap_grad_reduce and overlap_param_gather run as the lowering models them
  // (parallel_sharding.hpp).
  if (plan.tp_comm_overlap()) {
    return "tp_comm_overlap: TP collectives pipelined with their GEMMs in chunks are not "
           "implemented in the executor yet";
  }
  if (plan.grad_reduce_dtype() == pb::GRAD_REDUCE_DTYPE_BF16)
    return "grad_reduce_dtype bf16: the executor reduces gradients in fp32";
  return precision_problem(plan);
}

std::string model_problem(const pb::ModelSpec& m) {
  if (m.has_mla())
    return "model " + m.name() +
           ": multi-head latent attention is not implemented in the executor yet";
  if (m.qk_norm()) return "model " + m.name() + ": qk_norm is not implemented in the executor yet";
  if (m.hidden_dropout() > 0)
    return "model " + m.name() + ": hidden_dropout > 0 is not implemented in the executor yet";
  if (m.has_rotary_fraction() && m.rotary_fraction() != 1.0) {
    return "model " + m.name() +
           ": partial rotary embeddings are not implemented in the executor yet";
  }
  return "";
}

// MoE: experts split over EP (inside dp) and each expert's FFN over TP.
std::string moe_problem(const pb::Plan& plan, const pb::ModelSpec& m, int64_t tp, int64_t dp) {
  const int64_t ep = plan::degrees_of(plan.parallel()).ep;
  if (!m.has_moe()) {
    return ep > 1 ? "parallel.ep " + str(ep) + ": expert parallelism needs an MoE model (" +
                        m.name() + " is dense)"
                  : std::string();
  }
  const auto& moe = m.moe();
  if (moe.num_experts() % ep != 0) {
    return "parallel.ep " + str(ep) + " must divide moe.num_experts " + str(moe.num_experts());
  }
  if (dp % ep != 0)
    return "parallel.ep " + str(ep) + " must divide dp " + str(dp) + " (EP groups are dp replicas)";
  const int64_t shared = moe.num_shared_experts() * (moe.shared_expert_ffn_hidden_size() > 0
                                                         ? moe.shared_expert_ffn_hidden_size()
                                                         : moe.expert_ffn_hidden_size());
  if (moe.expert_ffn_hidden_size() % tp != 0 || shared % tp != 0) {
    return "parallel.tp " + str(tp) + " must divide moe.expert_ffn_hidden_size " +
           str(moe.expert_ffn_hidden_size()) + " and the shared experts' width " + str(shared);
  }
  return "";
}

// ZeRO-3/FSDP (parallel_sharding.hpp) gathers and reduces each part's flat chunks over dp.
std::string sharding_problem(const pb::Plan& plan, const pb::ModelSpec& m) {
  const auto s = plan.sharding();
  if (s != pb::SHARDING_ZERO3 && s != pb::SHARDING_FSDP) return "";
  const std::string name = "sharding " + std::string(s == pb::SHARDING_FSDP ? "fsdp" : "zero3");
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
  if (auto p = model_problem(c.model); !p.empty()) return p;
  const auto& m = c.model;
  const plan::Degrees d = plan::degrees_of(c.plan.parallel());
  const int64_t tp = d.tp, dp = d.dp;
  if (m.num_attention_heads() % tp != 0 || m.num_kv_heads() % tp != 0 ||
      m.ffn_hidden_size() % tp != 0) {
    return "parallel.tp " + str(tp) + " must divide num_attention_heads " +
           str(m.num_attention_heads()) + ", num_kv_heads " + str(m.num_kv_heads()) +
           " and ffn_hidden_size " + str(m.ffn_hidden_size());
  }
  if (auto p = moe_problem(c.plan, m, tp, dp); !p.empty()) return p;
  if (auto p = sharding_problem(c.plan, m); !p.empty()) return p;
  const int64_t mbs = c.plan.micro_batch_size();
  const int64_t gbs = c.plan.job().global_batch_size();
  if (mbs <= 0 || gbs % (dp * mbs) != 0) {
    return "job.global_batch_size " + str(gbs) +
           " must be a multiple of dp x micro_batch_size = " + str(dp * mbs);
  }
  if (c.plan.job().seq_len() > m.max_seq_len()) {
    return "job.seq_len " + str(c.plan.job().seq_len()) + " exceeds the model's max_seq_len " +
           str(m.max_seq_len());
  }
  if (c.plan.parallel().sequence_parallel() && c.plan.job().seq_len() % tp != 0) {
    return "parallel.sequence_parallel: tp " + str(tp) + " must divide job.seq_len " +
           str(c.plan.job().seq_len());
  }
  if (c.steps < 1) return "steps must be at least 1";
  return stage_problem(c.plan, m);
}

std::vector<int64_t> layers_per_stage(const pb::Plan& plan, const pb::ModelSpec& model) {
  const int64_t pp = plan::degrees_of(plan.parallel()).pp;
  if (plan.layers_per_stage_size() > 0)
    return {plan.layers_per_stage().begin(), plan.layers_per_stage().end()};
  return std::vector<int64_t>(static_cast<size_t>(pp), model.num_layers() / pp);
}

std::string stage_problem(const pb::Plan& plan, const pb::ModelSpec& m) {
  const int64_t pp = plan::degrees_of(plan.parallel()).pp;
  if (plan.layers_per_stage_size() == 0) {
    if (m.num_layers() % pp != 0) {
      return "parallel.pp " + str(pp) + ": " + str(m.num_layers()) +
             " layers do not split evenly; give layers_per_stage";
    }
    return "";
  }
  if (plan.layers_per_stage_size() != pp)
    return "layers_per_stage: needs pp = " + str(pp) + " entries";
  int64_t sum = 0;
  for (int64_t n : plan.layers_per_stage()) {
    if (n < 0) return "layers_per_stage: entries must be >= 0";
    sum += n;
  }
  if (sum != m.num_layers())
    return "layers_per_stage: sums to " + str(sum) + ", the model has " + str(m.num_layers());
  return "";
}

}  // namespace orrery::executor
