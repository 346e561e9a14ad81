// A plan with every default made explicit and every validity rule checked against its model and
// cluster. Everything downstream (lowering, memory, engines) reads a ResolvedPlan, never a raw
// pb::Plan, so a default is decided in exactly one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::plan {

// Parallel dimensions that decide where a rank sits (EP is carved out of CP x DP, see RankLayout).
enum class Dim { kTp, kCp, kDp, kPp };
const char* to_string(Dim dim);

struct Degrees {
  int64_t tp = 1, cp = 1, dp = 1, pp = 1, ep = 1, vp = 1;
  // MoE parallel folding (plan parallel.etp): the routed experts' tensor-parallel degree, and the
  // MoE layers regroup a stage's tp x cp x dp ranks as etp x ep x edp (RankLayout). 0: no
  // folding (the experts are split by tp, ep is carved out of dp x cp).
  int64_t etp = 0;
  bool folded() const { return etp > 0; }
  // The degree the routed experts' FFN width is split by.
  int64_t expert_tp() const { return folded() ? etp : tp; }
  // Expert-data-parallel degree: ranks of a stage holding the same expert shard.
  int64_t edp() const { return folded() ? tp * cp * dp / (ep * etp) : dp * cp / ep; }
  // Ranks of a grid where every pipeline stage has these degrees (see ResolvedPlan::world_size
  // for plans whose stages differ).
  int64_t world_size() const { return tp * cp * dp * pp; }
  bool operator==(const Degrees&) const = default;
};

// Bytes per element in each role, from the job's precision (Megatron mixed precision: bf16/fp16
// compute, fp32 master weights, fp32 Adam moments, fp32 gradient reduction for bf16).
struct Precisions {
  double activation_bytes = 2;
  double param_bytes = 2;            // the compute copy of a weight
  double grad_bytes = 4;             // accumulated and reduced gradients
  double master_param_bytes = 4;     // 0 for fp32 training (the compute copy is the master)
  double optimizer_state_bytes = 8;  // Adam m and v
  std::string dtype = "bf16";        // which DeviceSpec peak applies to GEMMs
  // precision fp8 (plan/fp8.hpp): the recipe (never UNSPECIFIED once resolved), whether the
  // attention core and the ZeRO/FSDP parameter gathers are fp8 too, and whether the recipe was
  // the default rather than the plan's (outputs say so).
  pb::Fp8Recipe fp8_recipe = pb::FP8_RECIPE_UNSPECIFIED;
  bool fp8_attention = false;
  bool fp8_param_gather = false;
  bool fp8_recipe_defaulted = false;
  // Bytes of a gradient on the wire of the data-parallel reduction: grad_bytes unless the plan's
  // grad_reduce_dtype says otherwise (resolve_plan).
  double grad_reduce_bytes = 4;
};

struct ResolvedPlan {
  pb::Plan plan;  // as given, with defaults filled in (degrees, schedule, sharding, recompute)
  pb::ModelSpec model;
  pb::ClusterSpec cluster;
  // The plan's degrees. When stages differ (stage_degrees not empty), tp is stage 0's and dp is
  // parallel.dp, which then only sizes the pipeline micro-batch (micro_batch_size x dp
  // sequences); each stage's own tp and dp are in stage_degrees.
  Degrees degrees;
  // Heterogeneous stages (plan.stage_tp / stage_dp): the degrees of each pipeline rank, pp
  // entries whose tp and dp are that stage's and the rest the plan's. Empty when every stage has
  // `degrees` (lists equal to parallel.tp/dp resolve to empty: one code path for uniform plans).
  std::vector<Degrees> stage_degrees;
  Precisions precision;
  int64_t seq_len = 0;
  int64_t micro_batch_size = 0;
  int64_t num_micro_batches = 0;  // per DP replica per step (gradient accumulation)
  // Layers of each virtual stage, pp * vp entries; virtual stage s = chunk * pp + pipeline rank
  // (Megatron's interleaving).
  std::vector<int64_t> layers_per_stage;
  // Parallel dimensions from innermost (consecutive ranks) to outermost.
  std::vector<Dim> placement;
  // Global device index of each rank.
  std::vector<int64_t> device_of_rank;

  pb::PipelineSchedule schedule() const { return plan.parallel().schedule(); }
  pb::Sharding sharding() const { return plan.sharding(); }
  pb::Recompute recompute() const { return plan.recompute(); }
  // Whether decoder layer `layer` (0-based, over the model) is recomputed whole: recompute full,
  // every layer or every recompute_every-th.
  bool recomputes_layer(int64_t layer) const;
  // Whether recompute selective re-runs `module` (recompute_modules; core_attn when empty).
  bool recomputes_module(pb::RecomputeModule module) const;
  bool sequence_parallel() const { return plan.parallel().sequence_parallel(); }
  // Devices used: the sum over pipeline stages of their tp x cp x dp.
  int64_t world_size() const;
  // First model layer of virtual stage s.
  int64_t first_layer(int64_t stage) const;

  // The ranks a ZeRO/FSDP shard is spread over, the group its gradients are reduced over (the
  // lowering's): for dense weights dp x cp (context-parallel ranks hold the same weights, and
  // Megatron's distributed optimizer and torchtitan's FSDP shard over both), or HSDP's shard
  // group; for routed experts' weights the expert-data-parallel group, Degrees::edp() (dp x cp /
  // ep, or tp x cp x dp / (ep x etp) when folded). 1 without sharding.
  int64_t dense_shard_degree() const;
  int64_t expert_shard_degree() const;

  bool uniform_stages() const { return stage_degrees.empty(); }
  // Degrees of pipeline rank p (`degrees` when the stages are uniform).
  const Degrees& stage(int64_t p) const;
  // This plan as the ranks of pipeline rank p see it: degrees.tp/dp are the stage's and
  // micro_batch_size is what one of its replicas processes (micro_batch_size x dp / stage dp),
  // so the per-rank code (op shapes, layer programs, memory) reads the usual fields. The rank
  // grid (stage_degrees, device_of_rank) and the micro-batch count stay the whole plan's.
  ResolvedPlan for_stage(int64_t p) const;
};

// The plan's degrees as written, 1 where a degree is absent. The one place an absent degree is
// decided (resolve_plan, the executor and the planner all call it).
Degrees degrees_of(const pb::Parallelism& parallel);

// The bytes per element of each role for a job precision: the one precision table.
Precisions precisions_of(pb::Precision precision);

// Parallel dimensions from innermost to outermost: "tp,cp,dp,pp" in any order ("ep" is accepted
// and ignored: EP lives inside the (cp, dp) plane; missing dimensions are appended outermost;
// empty: the default "tp,cp,dp,pp"). An unknown or repeated dimension is an InputError naming
// placement_order.
std::vector<Dim> parse_placement(const std::string& text, const SourceMap& where = SourceMap());

// The device spec `rank` runs on.
const pb::DeviceSpec& device_of(const ResolvedPlan& plan, int64_t rank);

// ZeRO-3, FSDP and HSDP: parameters kept as shards and gathered per bucket around each pass (the
// lowering, the memory model, the analytic engine, the planner and the executor ask the same).
bool shards_parameters(pb::Sharding sharding);

// Fills defaults and checks the rules. Violations throw InputError naming the plan field and
// the rule ("parallel.tp: rule tp-divides-kv-heads: tp 3 must divide num_kv_heads 8"); `where`
// locates the field in the plan file when there is one.
ResolvedPlan resolve_plan(const pb::Plan& plan, const pb::ModelSpec& model,
                          const pb::ClusterSpec& cluster, const SourceMap& where = SourceMap());

// The rules of resolve_plan that need no cluster (degrees against the model, batch, sequence,
// pipeline, sharding), with nothing placed: the first violation as resolve_plan words it, or ""
// when none. For callers that check a plan before any cluster is at hand (the executor's ranks).
std::string rule_violation(const pb::Plan& plan, const pb::ModelSpec& model);

}  // namespace orrery::plan
