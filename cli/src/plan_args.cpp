#include "plan_args.hpp"

#include "text.hpp"

#include <filesystem>
#include <sstream>
#include <tuple>

#include "number_flags.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/units.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/framework_profile.hpp"
#include "orrery/plan/plan_defaults.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/degradations.hpp"
#include "orrery/topologies/stragglers.hpp"

namespace orrery::cli {
namespace {

// A flag's enum value by its file spelling, with the file format's suggestions.
int parse_enum(const std::string& flag, const std::string& text,
               const google::protobuf::EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 0; i < e->value_count(); ++i) {
    if (e->value(i)->number() == 0) continue;
    const std::string name = enum_value_name(*e->value(i));
    if (name == text) return e->value(i)->number();
    names.push_back(name);
  }
  throw base::InputError("", 0, flag, "got '" + text + "'" + base::suggest(text, names));
}

// A comma list of integers for a repeated plan field.
void set_int_list(const std::string& flag, const std::string& text,
                  google::protobuf::RepeatedField<int64_t>* out) {
  out->Clear();
  for (const auto& item : split_commas(text)) {
    int64_t v = 0;
    try {
      size_t used = 0;
      v = std::stoll(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw base::InputError("", 0, flag, "got '" + item + "', expected an integer");
    }
    // The plan rule stage-degrees-per-stage's bound, checked here so that the refusal names this
    // flag: plan resolution checks other fields first (a -1 was refused as a missing --dp).
    if (v < 1) throw base::InputError("", 0, flag, "got " + item + ", a degree is at least 1");
    out->Add(v);
  }
}

double bucket_bytes(const std::string& text) {
  try {
    return base::units::parse(text, base::units::Unit::kBytes);
  } catch (const std::invalid_argument& e) {
    throw base::InputError("", 0, "--bucket", e.what());
  }
}

void check_number_flags(const PlanArgs& a) {
  const auto* plan = pb::Plan::descriptor();
  const auto* job = pb::Job::descriptor();
  const auto* par = pb::Parallelism::descriptor();
  check_flag("--nodes", plan, "nodes", a.nodes);
  check_flag("--global-batch", job, "global_batch_size", a.global_batch);
  check_flag("--seq", job, "seq_len", a.seq);
  check_flag("--micro-batch", plan, "micro_batch_size", a.micro_batch);
  check_flag("--tp-comm-overlap-chunks", plan, "tp_comm_overlap_chunks", a.tp_comm_overlap_chunks);
  for (const auto& [flag, field, value] : {std::tuple{"--tp", "tp", a.tp},
                                           {"--pp", "pp", a.pp},
                                           {"--dp", "dp", a.dp},
                                           {"--cp", "cp", a.cp},
                                           {"--ep", "ep", a.ep},
                                           {"--etp", "etp", a.etp},
                                           {"--vp", "vp", a.vp}}) {
    check_flag(flag, par, field, value);
  }
  check_flag("--shard-group", plan, "shard_group_size", a.shard_group);
  check_flag("--prefetch", plan, "prefetch_buckets", a.prefetch);
  if (a.bucket) check_flag("--bucket", plan, "bucket_bytes", bucket_bytes(*a.bucket), *a.bucket);
  if (a.moe_imbalance) {
    check_flag("--moe-imbalance", plan, "moe_imbalance", *a.moe_imbalance,
               base::units::number(*a.moe_imbalance));
  }
  if (a.moe_capacity_factor) {
    check_flag("--moe-capacity-factor", plan, "moe_capacity_factor", *a.moe_capacity_factor,
               base::units::number(*a.moe_capacity_factor));
  }
}

// How an MoE layer routes, dispatches and runs its experts.
void add_moe_flags(CLI::App* cmd, PlanArgs& a) {
  cmd->add_option("--moe-dispatcher", a.moe_dispatcher,
                  "MoE token dispatcher: alltoall | deepep (DeepEP: a token crosses the network "
                  "once per node it reaches; default: once per routed expert, or per node under "
                  "group-limited routing)");
  cmd->add_option("--moe-imbalance", a.moe_imbalance,
                  "Busiest expert's tokens over the mean (>= 1; default 1)");
  cmd->add_option("--moe-capacity-factor", a.moe_capacity_factor,
                  "MoE token dropping: each expert takes at most this many times its mean share "
                  "of a rank's routed tokens (Megatron-core --moe-expert-capacity-factor; "
                  "default: no capacity, nothing dropped)");
  cmd->add_option("--moe-expert-gemm", a.moe_expert_gemm,
                  "grouped | per_expert: the routed experts as one grouped GEMM per kernel, or "
                  "one GEMM per expert (Megatron-core's SequentialMLP; default grouped)");
  cmd->add_flag("--moe-pad-to-capacity", a.moe_pad_to_capacity,
                "With --moe-capacity-factor: every expert's input padded to its capacity "
                "(Megatron-core --moe-pad-expert-input-to-capacity; default off; a plan's true "
                "stays on)");
}

// The switches that overlap communication with compute (each default off; a plan's true stays on).
void add_overlap_flags(CLI::App* cmd, PlanArgs& a) {
  cmd->add_flag("--overlap-grad-reduce", a.overlap_grad_reduce,
                "Overlap gradient reduction with backward (default off; a plan's true stays on)");
  cmd->add_flag(
      "--overlap-param-gather", a.overlap_param_gather,
      "Overlap ZeRO parameter gathers with forward (default off; a plan's true stays on)");
  cmd->add_flag("--tp-comm-overlap", a.tp_comm_overlap,
                "Pipeline SP's TP collectives with their GEMMs in chunks (Megatron-core "
                "--tp-comm-overlap; needs --sp; default off; a plan's true stays on)");
  cmd->add_flag("--moe-a2a-overlap", a.moe_a2a_overlap,
                "MoE: run each steady micro-batch pair merged, each one's expert all-to-all "
                "beside the other's compute (Megatron-core --overlap-moe-expert-parallel-comm; "
                "default off; a plan's true stays on)");
  cmd->add_option("--tp-comm-overlap-chunks", a.tp_comm_overlap_chunks,
                  "Pieces of each overlapped collective and GEMM (>= 2; default 4)");
}

// The dtypes of what the step moves besides the training dtype.
void add_dtype_flags(CLI::App* cmd, PlanArgs& a) {
  cmd->add_option("--grad-reduce-dtype", a.grad_reduce_dtype,
                  "fp32 | bf16: dtype of the data-parallel gradient reduction (default: fp32 for "
                  "bf16 and fp8 training, the training dtype otherwise)");
  cmd->add_option("--optimizer-state-dtype", a.optimizer_state_dtype,
                  "fp32 | bf16: dtype of Adam's moments (bf16: Megatron-core's precision-aware "
                  "optimizer, --exp-avg-dtype/--exp-avg-sq-dtype bf16; default fp32)");
}

}  // namespace

void add_plan_flags(CLI::App* cmd, PlanArgs& a) {
  cmd->add_option("--plan", a.plan_file,
                  "Plan file (YAML/JSON); a flag given overrides its field, a flag left out never "
                  "does (the defaults below apply where the plan is silent)");
  cmd->add_option("--model", a.model, "Model preset or file (or the plan's `model`)");
  cmd->add_option("--cluster", a.cluster, "Cluster preset or file (or the plan's `cluster`)");
  cmd->add_option(
         "--nodes", a.nodes,
         "Size the cluster to this many nodes (default: the plan's nodes, else the cluster's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tp", a.tp, "Tensor-parallel degree (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--pp", a.pp, "Pipeline-parallel degree (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--dp", a.dp, "Data-parallel degree (default: fill the cluster)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cp", a.cp, "Context-parallel degree (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--ep", a.ep, "Expert-parallel degree (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--etp", a.etp,
                  "MoE parallel folding: the experts' tensor-parallel degree; ep then comes from "
                  "tp x cp x dp (default: no folding)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--vp", a.vp, "Virtual pipeline stages per rank (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag(
      "--sp", a.sp,
      "Megatron sequence parallelism (default off; a plan's sequence_parallel: true stays on)");
  cmd->add_option(
      "--schedule", a.schedule,
      "gpipe | one_f_one_b | interleaved_1f1b (default one_f_one_b, interleaved_1f1b when vp > 1)");
  cmd->add_option("--sharding", a.sharding,
                  "none | zero1 | zero2 | zero3 | fsdp | hsdp (default none)");
  cmd->add_option("--shard-group", a.shard_group, "hsdp: ranks a parameter is sharded over");
  cmd->add_option("--recompute", a.recompute,
                  "none | selective | selective_op | full (default none)");
  cmd->add_option("--recompute-every", a.recompute_every,
                  "full: recompute only every N-th layer (torchtitan's layer-level checkpointing; "
                  "default every layer)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--recompute-modules", a.recompute_modules,
                  "selective: the modules re-run, comma-separated: core_attn, layernorm, "
                  "moe_act, mlp, moe, shared_experts, mla_up_proj (Megatron-core "
                  "--recompute-modules; default core_attn)");
  cmd->add_option("--micro-batch", a.micro_batch, "Sequences per micro-batch (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--global-batch", a.global_batch, "Sequences per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", a.seq, "Sequence length (default: the model's max_seq_len)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--precision", a.precision,
                  "fp32 | bf16 | fp16 | fp8 (default: the plan's job.precision, else bf16 on GPUs, "
                  "fp32 on CPUs)");
  cmd->add_option(
      "--fp8-recipe", a.fp8_recipe,
      "fp8 scaling: delayed | current | blockwise | mxfp8 | rowwise (default: Transformer "
      "Engine's for the devices, mxfp8 on Blackwell, else delayed; stated in the output)");
  cmd->add_flag("--fp8-attention", a.fp8_attention,
                "fp8: the attention core in fp8 too (default off; a plan's true stays on)");
  cmd->add_flag("--fp8-param-gather", a.fp8_param_gather,
                "fp8 with zero1/zero2: gather the fp8 weight copies (default off; a plan's true "
                "stays on)");
  cmd->add_option(
      "--bucket", a.bucket,
      "Gradient/parameter bucket size, e.g. '40 MiB' (default 0: the simulator's default)");
  cmd->add_option("--prefetch", a.prefetch, "FSDP/ZeRO-3 buckets gathered ahead (default 0)");
  cmd->add_option("--attention,--attention-kernel", a.attention,
                  "flash | flash_2 | flash_3 | materialized (default flash; flash_2 and flash_3 "
                  "at their papers' efficiency on the device)");
  cmd->add_option("--placement", a.placement,
                  "Dimensions innermost first (default tp,cp,ep,dp,pp)");
  cmd->add_option("--layers-per-stage", a.layers_per_stage,
                  "Comma-separated layers per (virtual) stage (default: an even split)");
  cmd->add_option("--stage-node-groups", a.stage_node_groups,
                  "Comma-separated node group per pipeline stage");
  cmd->add_option(
      "--stage-tp", a.stage_tp,
      "Comma-separated tensor-parallel degree per pipeline stage (heterogeneous clusters)");
  cmd->add_option(
      "--stage-dp", a.stage_dp,
      "Comma-separated data-parallel degree per pipeline stage (heterogeneous clusters)");
  add_moe_flags(cmd, a);
  add_overlap_flags(cmd, a);
  add_dtype_flags(cmd, a);
  cmd->add_option("--framework", a.framework,
                  "NAME@VERSION of the framework release (e.g. megatron-core@0.6): its profile "
                  "fills the overlap, bucket, prefetch and kernel fields neither the plan nor a "
                  "flag states (docs/simulator.md#framework-profiles)");
}

namespace {

// Degrees, schedule and stages: each flag given replaces the plan's field (what neither states is
// filled by plan::fill_unstated).
void apply_parallel_flags(const PlanArgs& a, pb::Plan& p) {
  auto* q = p.mutable_parallel();
  if (a.tp) q->set_tp(*a.tp);
  if (a.pp) q->set_pp(*a.pp);
  if (a.cp) q->set_cp(*a.cp);
  if (a.ep) q->set_ep(*a.ep);
  if (a.etp) q->set_etp(*a.etp);
  if (a.vp) q->set_vp(*a.vp);
  if (a.dp) q->set_dp(*a.dp);
  if (a.sp) q->set_sequence_parallel(true);
  if (a.schedule)
    q->set_schedule(static_cast<pb::PipelineSchedule>(
        parse_enum("--schedule", *a.schedule, pb::PipelineSchedule_descriptor())));
  if (a.stage_tp) set_int_list("--stage-tp", *a.stage_tp, p.mutable_stage_tp());
  if (a.stage_dp) set_int_list("--stage-dp", *a.stage_dp, p.mutable_stage_dp());
}

// Sharding, recomputation, buckets, kernels, placement and overlap: each flag given replaces the
// plan's field.
void apply_strategy_flags(const PlanArgs& a, pb::Plan& p) {
  if (a.sharding)
    p.set_sharding(static_cast<pb::Sharding>(
        parse_enum("--sharding", *a.sharding, pb::Sharding_descriptor())));
  if (a.shard_group) p.set_shard_group_size(*a.shard_group);
  if (a.recompute)
    p.set_recompute(static_cast<pb::Recompute>(
        parse_enum("--recompute", *a.recompute, pb::Recompute_descriptor())));
  if (a.recompute_every) p.set_recompute_every(*a.recompute_every);
  if (a.recompute_modules) {
    p.clear_recompute_modules();
    for (const auto& item : split_commas(*a.recompute_modules)) {
      p.add_recompute_modules(static_cast<pb::RecomputeModule>(
          parse_enum("--recompute-modules", item, pb::RecomputeModule_descriptor())));
    }
  }
  if (a.moe_dispatcher) {
    p.set_moe_dispatcher(static_cast<pb::MoeDispatcher>(
        parse_enum("--moe-dispatcher", *a.moe_dispatcher, pb::MoeDispatcher_descriptor())));
  }
  if (a.moe_expert_gemm) {
    p.set_moe_expert_gemm(static_cast<pb::MoeExpertGemm>(
        parse_enum("--moe-expert-gemm", *a.moe_expert_gemm, pb::MoeExpertGemm_descriptor())));
  }
  if (a.bucket) p.set_bucket_bytes(bucket_bytes(*a.bucket));
  if (a.prefetch) p.set_prefetch_buckets(*a.prefetch);
  if (a.attention) {
    p.set_attention_kernel(static_cast<pb::AttentionKernel>(
        parse_enum("--attention", *a.attention, pb::AttentionKernel_descriptor())));
  }
  if (a.placement) p.set_placement_order(*a.placement);
  if (a.layers_per_stage) {
    p.clear_layers_per_stage();
    for (const auto& item : split_commas(*a.layers_per_stage)) {
      try {
        p.add_layers_per_stage(std::stoll(item));
      } catch (const std::exception&) {
        throw base::InputError("", 0, "--layers-per-stage",
                               "got '" + item + "', expected an integer");
      }
    }
  }
  if (a.stage_node_groups) {
    p.clear_stage_node_groups();
    for (const auto& item : split_commas(*a.stage_node_groups)) p.add_stage_node_groups(item);
  }
  if (a.moe_imbalance) p.set_moe_imbalance(*a.moe_imbalance);
  if (a.moe_capacity_factor) p.set_moe_capacity_factor(*a.moe_capacity_factor);
  if (a.moe_pad_to_capacity) p.set_moe_pad_to_capacity(true);
  if (a.overlap_grad_reduce) p.set_overlap_grad_reduce(true);
  if (a.overlap_param_gather) p.set_overlap_param_gather(true);
  if (a.tp_comm_overlap) p.set_tp_comm_overlap(true);
  if (a.moe_a2a_overlap) p.set_moe_a2a_overlap(true);
  if (a.tp_comm_overlap_chunks) p.set_tp_comm_overlap_chunks(*a.tp_comm_overlap_chunks);
  if (a.grad_reduce_dtype)
    p.set_grad_reduce_dtype(static_cast<pb::GradReduceDtype>(
        parse_enum("--grad-reduce-dtype", *a.grad_reduce_dtype, pb::GradReduceDtype_descriptor())));
  if (a.optimizer_state_dtype) {
    p.set_optimizer_state_dtype(static_cast<pb::OptimizerStateDtype>(
        parse_enum("--optimizer-state-dtype", *a.optimizer_state_dtype,
                   pb::OptimizerStateDtype_descriptor())));
  }
}

// Whether a flag sets plan field `field` (one a framework profile may fill).
bool flag_states(const PlanArgs& a, const std::string& field) {
  if (field == "overlap_grad_reduce") return a.overlap_grad_reduce;
  if (field == "overlap_param_gather") return a.overlap_param_gather;
  if (field == "tp_comm_overlap") return a.tp_comm_overlap;
  if (field == "tp_comm_overlap_chunks") return a.tp_comm_overlap_chunks.has_value();
  if (field == "grad_reduce_dtype") return a.grad_reduce_dtype.has_value();
  if (field == "prefetch_buckets") return a.prefetch.has_value();
  if (field == "bucket_bytes") return a.bucket.has_value();
  if (field == "attention_kernel") return a.attention.has_value();
  return false;
}

// The framework profile the plan (or --framework) names fills the fields that neither the plan
// file nor a flag states.
plan::AppliedProfile apply_framework(const PlanArgs& a, const SourceMap& where, pb::Plan& p) {
  if (a.framework) p.set_framework(*a.framework);
  if (p.framework().empty()) return {};
  const bool by_flag = a.framework.has_value();
  const pb::FrameworkProfile& profile = plan::find_framework_profile(
      p.framework(), by_flag ? "" : a.plan_file, by_flag ? "--framework" : "framework",
      by_flag ? 0 : where.line("framework"));
  return plan::apply_framework_profile(p, profile, p.framework(), [&](const std::string& field) {
    return where.line(field) > 0 || flag_states(a, field);
  });
}

// A relative path in a plan file is relative to the plan file, as in any file that names others
// (a preset name stays a name).
std::string beside(const std::string& plan_file, const std::string& name_or_file) {
  if (!base::names_a_file(name_or_file)) return name_or_file;
  const std::filesystem::path path(name_or_file);
  if (path.is_absolute()) return name_or_file;
  return (std::filesystem::path(plan_file).parent_path() / path).lexically_normal().string();
}

}  // namespace

std::string path_for_plan_file(const std::string& out_file, const std::string& name_or_file) {
  if (!base::names_a_file(name_or_file)) return name_or_file;
  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(fs::path(out_file)).parent_path();
  return fs::absolute(fs::path(name_or_file)).lexically_normal().lexically_relative(dir).string();
}

void add_straggler_flag(CLI::App* cmd, std::vector<std::string>& stragglers) {
  cmd->add_option("--straggler", stragglers,
                  "des: a slow GPU (gpu=N:F, its compute F times as long) or a degraded NIC "
                  "link (nic=NODE.I:F, F of its bandwidth), added to the cluster's stragglers; "
                  "repeatable (docs/simulator.md#stragglers)");
}

std::function<void(pb::ClusterSpec&)> straggler_adjust(const std::vector<std::string>& stragglers) {
  if (stragglers.empty()) return {};
  return [stragglers](pb::ClusterSpec& cluster) {
    for (const std::string& s : stragglers) topologies::add_straggler(cluster, s, "--straggler");
  };
}

void add_degradation_flag(CLI::App* cmd, std::vector<std::string>& degradations) {
  cmd->add_option("--degradation", degradations,
                  "A degradation episode kind, COMPONENT:mean_interval_s=T,step_ratio=R,"
                  "detect_steps=N (or duration_s=D): replaces the cluster file's entry for that "
                  "component (gpu, host, nic, link, switch); repeatable (docs/goodput.md)");
}

void apply_degradations(pb::ClusterSpec& cluster, const std::vector<std::string>& degradations) {
  for (const std::string& d : degradations)
    topologies::set_degradation(cluster, d, "--degradation");
}

LoadedJob load_job(const PlanArgs& a, const std::function<void(pb::ClusterSpec&)>& adjust_cluster) {
  LoadedJob job;
  pb::Plan& p = job.plan;
  check_number_flags(a);
  if (!a.plan_file.empty()) {
    read_spec_file(a.plan_file, &p, &job.plan_where);
    p.set_model(beside(a.plan_file, p.model()));
    p.set_cluster(beside(a.plan_file, p.cluster()));
  }
  if (!a.model.empty()) p.set_model(a.model);
  if (!a.cluster.empty()) p.set_cluster(a.cluster);
  if (p.model().empty())
    throw base::InputError("", 0, "--model", "required (or a --plan file with `model`)");
  if (p.cluster().empty())
    throw base::InputError("", 0, "--cluster", "required (or a --plan file with `cluster`)");
  if (a.nodes) p.set_nodes(*a.nodes);
  auto* job_spec = p.mutable_job();
  if (a.global_batch) job_spec->set_global_batch_size(*a.global_batch);
  if (a.seq) job_spec->set_seq_len(*a.seq);
  if (a.precision)
    job_spec->set_precision(static_cast<pb::Precision>(
        parse_enum("--precision", *a.precision, pb::Precision_descriptor())));
  if (a.fp8_recipe)
    job_spec->set_fp8_recipe(static_cast<pb::Fp8Recipe>(
        parse_enum("--fp8-recipe", *a.fp8_recipe, pb::Fp8Recipe_descriptor())));
  if (a.fp8_attention) job_spec->set_fp8_attention(true);
  if (a.fp8_param_gather) job_spec->set_fp8_param_gather(true);
  job.global_batch_filled = job_spec->global_batch_size() <= 0;
  if (job.global_batch_filled && !a.global_batch_fills_pipeline)
    throw base::InputError("", 0, "--global-batch",
                           "required (or the plan's job.global_batch_size)");
  if (a.micro_batch) p.set_micro_batch_size(*a.micro_batch);

  job.model = models::load_model(p.model());
  std::optional<int64_t> nodes;
  if (p.has_nodes()) nodes = p.nodes();
  job.cluster = topologies::load_cluster(p.cluster(), nodes);
  if (adjust_cluster) {
    adjust_cluster(job.cluster);
    topologies::validate_cluster(job.cluster, SourceMap());
  }

  apply_parallel_flags(a, p);
  apply_strategy_flags(a, p);
  job.profile = apply_framework(a, job.plan_where, p);
  plan::fill_unstated(p, job.model, job.cluster);
  if (job.global_batch_filled) {
    const auto d = plan::degrees_of(p.parallel());
    job_spec->set_global_batch_size(d.dp * p.micro_batch_size() * d.pp);
  }
  job.plan_where.set_file(a.plan_file.empty() ? std::string() : a.plan_file);
  return job;
}

}  // namespace orrery::cli
