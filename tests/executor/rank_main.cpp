// One rank of a test training job: the executor's train_rank with flags, RANK/WORLD_SIZE/...
// from the environment (a single rank when they are absent). Exit status 1 on any error.
#include <cctype>
#include <iostream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "orrery/executor/blas_kernels.hpp"
#include "orrery/executor/rank_env.hpp"
#include "orrery/executor/trainer.hpp"
#include "orrery/models/model_catalog.hpp"

namespace {

std::string upper_case(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace orrery;
  // Started by mpirun or torchrun rather than orrery's launcher: choose the BLAS kernels as
  // `orrery run` does (re-executing once), so the ranks compute what launched ranks compute.
  if (executor::rank_env_from_environment()) executor::reexec_with_blas_kernels();
  std::string model = "tiny", placement, out, schedule = "1f1b", sharding = "none";
  int64_t prefetch = 0, shard_group = 0;
  std::string grad_reduce_dtype;
  int64_t tp = 1, cp = 1, dp = 1, pp = 1, vp = 1, ep = 1, mbs = 1, gbs = 4, seq = 32;
  double bucket = 0;
  bool sp = false, overlap_grad = false, overlap_gather = false;
  std::string precision = "fp32";
  executor::TrainConfig c;
  CLI::App app{"orrery executor test rank"};
  app.add_option("--model", model);
  app.add_option("--tp", tp);
  app.add_option("--cp", cp);
  app.add_option("--dp", dp);
  app.add_option("--pp", pp);
  app.add_option("--vp", vp, "model chunks per pipeline rank (interleaved_1f1b)");
  app.add_option("--ep", ep);
  app.add_flag("--sp", sp);
  app.add_option("--schedule", schedule, "gpipe | 1f1b | interleaved_1f1b");
  app.add_option("--micro-batch", mbs);
  app.add_option("--global-batch", gbs);
  app.add_option("--seq", seq);
  app.add_option("--bucket-bytes", bucket);
  app.add_option("--sharding", sharding, "none | zero1 | zero2 | zero3 | fsdp | hsdp");
  app.add_option("--shard-group", shard_group, "hsdp: ranks a parameter is sharded over");
  app.add_option("--grad-reduce-dtype", grad_reduce_dtype,
                 "fp32 | bf16 (default: the precision's)");
  app.add_option("--prefetch", prefetch, "FSDP buckets gathered ahead");
  app.add_option("--placement", placement);
  app.add_flag("--overlap-grad-reduce", overlap_grad, "DP buckets reduced during backward");
  app.add_flag("--overlap-param-gather", overlap_gather,
               "ZeRO-1/2 parameter gathers during the next forward");
  app.add_option("--precision", precision, "fp32 | bf16 | fp16");
  app.add_option("--loss-scale", c.loss_scaling.init_scale, "fp16: initial loss scale");
  app.add_option("--loss-scale-growth-interval", c.loss_scaling.growth_interval,
                 "fp16: clean steps before the scale grows");
  app.add_option("--lr", c.learning_rate);
  std::string recompute = "none";
  app.add_option("--recompute", recompute, "none | selective | selective_op | full");
  int64_t recompute_every = 0;
  app.add_option("--recompute-every", recompute_every, "full: every N-th layer only");
  std::vector<std::string> recompute_modules;
  app.add_option("--recompute-modules", recompute_modules,
                 "selective: Megatron-core's modules re-run (core_attn, mlp), comma-separated")
      ->delimiter(',');
  bool materialized = false;
  app.add_flag("--materialized-attention", materialized, "attention_kernel materialized");
  std::string optimizer_state_dtype;
  app.add_option("--optimizer-state-dtype", optimizer_state_dtype, "fp32 | bf16: Adam's moments");
  double capacity_factor = 0;
  bool pad_to_capacity = false;
  app.add_option("--moe-capacity-factor", capacity_factor, "MoE: each expert's capacity");
  app.add_flag("--moe-pad-to-capacity", pad_to_capacity, "MoE: experts' rows padded to it");
  std::string expert_gemm = "grouped";
  app.add_option("--moe-expert-gemm", expert_gemm, "grouped | per_expert");
  app.add_option("--steps", c.steps);
  app.add_option("--seed", c.seed);
  app.add_option("--timeout", c.timeout_s);
  app.add_option("--out", c.out_dir);
  app.add_flag("--save-params", c.save_parameters);
  executor::CheckpointOptions checkpoint;
  std::string inject;
  app.add_option("--checkpoint-every", checkpoint.every);
  app.add_option("--checkpoint-dir", checkpoint.dir);
  app.add_option("--resume", checkpoint.resume_dir);
  app.add_option("--inject-failure", inject, "rank=R,step=S[,at=step|save]");
  CLI11_PARSE(app, argc, argv);
  try {
    c.model = models::load_model(model);
    c.plan.set_model(model);
    c.plan.mutable_job()->set_global_batch_size(gbs);
    c.plan.mutable_job()->set_seq_len(seq);
    if (precision != "fp32" && precision != "bf16" && precision != "fp16")
      throw std::runtime_error("--precision " + precision + ": fp32, bf16 or fp16");
    c.plan.mutable_job()->set_precision(precision == "bf16"   ? pb::PRECISION_BF16
                                        : precision == "fp16" ? pb::PRECISION_FP16
                                                              : pb::PRECISION_FP32);
    pb::Recompute r = pb::RECOMPUTE_UNSPECIFIED;
    if (!pb::Recompute_Parse("RECOMPUTE_" + upper_case(recompute), &r) ||
        r == pb::RECOMPUTE_UNSPECIFIED)
      throw std::runtime_error("--recompute " + recompute +
                               ": none, selective, selective_op or full");
    c.plan.set_recompute(r);
    if (recompute_every > 0) c.plan.set_recompute_every(recompute_every);
    for (const auto& m : recompute_modules) {
      pb::RecomputeModule module = pb::RECOMPUTE_MODULE_UNSPECIFIED;
      if (!pb::RecomputeModule_Parse("RECOMPUTE_MODULE_" + upper_case(m), &module) ||
          module == pb::RECOMPUTE_MODULE_UNSPECIFIED)
        throw std::runtime_error("--recompute-modules " + m + ": a Megatron-core module name");
      c.plan.add_recompute_modules(module);
    }
    if (materialized) c.plan.set_attention_kernel(pb::ATTENTION_KERNEL_MATERIALIZED);
    if (!optimizer_state_dtype.empty()) {
      pb::OptimizerStateDtype d = pb::OPTIMIZER_STATE_DTYPE_UNSPECIFIED;
      if (!pb::OptimizerStateDtype_Parse(
              "OPTIMIZER_STATE_DTYPE_" + upper_case(optimizer_state_dtype), &d))
        throw std::runtime_error("--optimizer-state-dtype " + optimizer_state_dtype +
                                 ": fp32 or bf16");
      c.plan.set_optimizer_state_dtype(d);
    }
    if (capacity_factor > 0) c.plan.set_moe_capacity_factor(capacity_factor);
    c.plan.set_moe_pad_to_capacity(pad_to_capacity);
    if (expert_gemm == "per_expert") c.plan.set_moe_expert_gemm(pb::MOE_EXPERT_GEMM_PER_EXPERT);
    c.plan.set_overlap_grad_reduce(overlap_grad);
    c.plan.set_overlap_param_gather(overlap_gather);
    c.plan.mutable_parallel()->set_tp(tp);
    c.plan.mutable_parallel()->set_cp(cp);
    c.plan.mutable_parallel()->set_dp(dp);
    c.plan.mutable_parallel()->set_pp(pp);
    c.plan.mutable_parallel()->set_ep(ep);
    c.plan.mutable_parallel()->set_sequence_parallel(sp);
    c.plan.mutable_parallel()->set_vp(vp);
    c.plan.mutable_parallel()->set_schedule(schedule == "gpipe" ? pb::PIPELINE_SCHEDULE_GPIPE
                                            : schedule == "interleaved_1f1b"
                                                ? pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B
                                                : pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
    c.plan.set_micro_batch_size(mbs);
    c.plan.set_bucket_bytes(bucket);
    pb::Sharding s = pb::SHARDING_UNSPECIFIED;
    if (!pb::Sharding_Parse("SHARDING_" + upper_case(sharding), &s) ||
        s == pb::SHARDING_UNSPECIFIED) {
      throw std::runtime_error("--sharding " + sharding +
                               ": none, zero1, zero2, zero3, fsdp or hsdp");
    }
    c.plan.set_sharding(s);
    c.plan.set_prefetch_buckets(prefetch);
    c.plan.set_shard_group_size(shard_group);
    if (!grad_reduce_dtype.empty()) {
      pb::GradReduceDtype g = pb::GRAD_REDUCE_DTYPE_UNSPECIFIED;
      if (!pb::GradReduceDtype_Parse("GRAD_REDUCE_DTYPE_" + upper_case(grad_reduce_dtype), &g))
        throw std::runtime_error("--grad-reduce-dtype " + grad_reduce_dtype + ": fp32 or bf16");
      c.plan.set_grad_reduce_dtype(g);
    }
    c.plan.set_placement_order(placement);
    const auto env = executor::rank_env_from_environment().value_or(executor::RankEnv{});
    if (!inject.empty()) checkpoint.inject = executor::parse_failure_injection(inject);
    executor::train_rank(c, env, std::cout, {}, checkpoint);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
