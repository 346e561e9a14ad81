// The flags that describe a job and its plan, shared by `simulate` (and later `plan`, `run`):
// either --plan FILE, or --model/--cluster with degrees and options, where flags given on the
// command line override the file's fields.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/plan/framework_profile.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::cli {

struct PlanArgs {
  std::string plan_file, model, cluster;
  std::optional<int64_t> nodes, tp, pp, dp, cp, ep, etp, vp, micro_batch, global_batch, seq;
  std::optional<int64_t> shard_group, prefetch, recompute_every;
  std::optional<std::string> recompute_modules, moe_dispatcher, moe_expert_gemm;
  std::optional<std::string> schedule, sharding, recompute, precision, bucket, placement, attention;
  std::optional<std::string> layers_per_stage, stage_node_groups, stage_tp, stage_dp;
  std::optional<std::string> fp8_recipe;
  bool fp8_attention = false, fp8_param_gather = false;
  std::optional<double> moe_imbalance, moe_capacity_factor;
  bool moe_pad_to_capacity = false;
  bool sp = false, overlap_grad_reduce = false, overlap_param_gather = false;
  bool tp_comm_overlap = false;
  bool moe_a2a_overlap = false;
  std::optional<int64_t> tp_comm_overlap_chunks;
  std::optional<std::string> grad_reduce_dtype, optimizer_state_dtype;
  std::optional<std::string> framework;  // --framework NAME@VERSION
  // `run` only: an unstated global batch (no flag, no plan field) becomes one micro-batch per
  // pipeline stage and replica, dp x micro-batch x pp, and the run's header says so. simulate and
  // plan still require it: a predicted step of a batch nobody chose answers no question.
  bool global_batch_fills_pipeline = false;
};

void add_plan_flags(CLI::App* cmd, PlanArgs& a);

struct LoadedJob {
  pb::Plan plan;
  pb::ModelSpec model;
  pb::ClusterSpec cluster;
  SourceMap plan_where;              // lines of --plan's fields, for plan-rule errors
  bool global_batch_filled = false;  // by PlanArgs::global_batch_fills_pipeline
  plan::AppliedProfile profile;      // what the named framework's profile filled (if any)
};

// Reads --plan (if any), applies the flags, loads model and cluster (sized by --nodes or the
// plan's nodes). dp, when nowhere given, fills the cluster: devices / (tp x pp x cp).
// Reads --plan (its relative model and cluster paths taken from the plan file's folder), applies
// the flags given, then plan::fill_unstated. `adjust_cluster`, when given, changes the loaded
// cluster before the plan is filled against it (sweep's device and network axes).
LoadedJob load_job(const PlanArgs& a,
                   const std::function<void(pb::ClusterSpec&)>& adjust_cluster = {});

// `--straggler gpu=N:F|nic=NODE.I:F` (repeatable; simulate and goodput): stragglers added to the
// cluster's own list (ClusterSpec.stragglers), for the des engine.
void add_straggler_flag(CLI::App* cmd, std::vector<std::string>& stragglers);
// The load_job adjustment that appends them (empty: none given, the cluster as loaded).
std::function<void(pb::ClusterSpec&)> straggler_adjust(const std::vector<std::string>& stragglers);

// `--degradation COMPONENT:mean_interval_s=T,step_ratio=R,detect_steps=N` (repeatable; goodput
// and plan --objective goodput): one flag text, parsed by topologies::set_degradation.
void add_degradation_flag(CLI::App* cmd, std::vector<std::string>& degradations);
// Each --degradation replaces the cluster's entry for its component (or adds one).
void apply_degradations(pb::ClusterSpec& cluster, const std::vector<std::string>& degradations);

// A model or cluster path as a plan file written to `out_file` must store it: relative to that
// file's folder (a preset name stays a name).
std::string path_for_plan_file(const std::string& out_file, const std::string& name_or_file);

}  // namespace orrery::cli
