// The plan space: every way the planner may parallelize one job on one cluster, as compact knob
// settings (`Knobs`) that become a pb::Plan. The validity rules are the simulator's own
// (plan::resolve_plan is the arbiter); the cheap divisibility checks here only keep obviously
// invalid shapes out of the enumeration, they never admit a plan resolve_plan rejects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::planner {

// What is being planned: model, cluster (already sized) and the job; `base` carries the fields
// the planner never changes (model and cluster names, nodes, job, attention kernel, MoE
// imbalance) and is copied into every candidate.
struct PlanningJob {
  pb::ModelSpec model;
  pb::ClusterSpec cluster;
  pb::Plan base;
};

// One point of the plan space. The layer split is not given layer by layer: it follows from the
// knobs (even, or balanced by layer_partition.hpp), so equal knobs always mean equal plans.
struct Knobs {
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vp = 1;
  bool sp = false;
  int64_t micro_batch = 1;
  pb::PipelineSchedule schedule = pb::PIPELINE_SCHEDULE_UNSPECIFIED;  // decided by vp when unset
  pb::Sharding sharding = pb::SHARDING_NONE;
  int64_t shard_group = 0;  // hsdp only
  pb::Recompute recompute = pb::RECOMPUTE_NONE;
  // Full recomputation of every N-th layer only (plan recompute_every, torchtitan's layer-level
  // checkpointing); 0: every layer. Reached by local search from recompute full, which halves
  // or doubles N: fewer layers re-run where memory allows, more where it does not.
  int64_t recompute_every = 0;
  double bucket_bytes = 0;  // 0: the simulator's default
  std::string placement;    // "" = tp,cp,dp,pp
  // Node group of each pipeline stage on heterogeneous clusters (pp entries), else empty.
  std::vector<std::string> stage_groups;
  // Stages with their own degrees (pp entries each, else empty): tp and dp of each stage; then
  // tp is stage 0's and dp sizes the pipeline micro-batch (micro_batch x dp sequences, the
  // largest stage dp). Searched on heterogeneous clusters, where one node group's stages may
  // shard wider or replicate less than another's.
  std::vector<int64_t> stage_tp, stage_dp;
  // Split layers by cost (first and last stages carry the embedding and the head) even when the
  // stages divide the layers; forced when they do not, or when stages differ in speed.
  bool balanced_split = false;
  bool overlap = true;  // overlap_grad_reduce and overlap_param_gather
  // tp_comm_overlap (only with sp, stage 0's tp > 1): on in the seed, as NeMo's recipes for
  // large models ship it; settings and local search also try it off.
  bool tp_overlap = false;
  // moe_a2a_overlap (Megatron-core's combined 1F1B): off in the seed, as Megatron-core ships it;
  // settings and local search also try it on where PlanSpace::a2a_overlap_allowed.
  bool a2a_overlap = false;
  // MoE parallel folding: the experts' tensor-parallel degree (plan parallel.etp), ep then
  // drawn from tp x cp x dp; 0: not folded (ep from dp x cp, experts split by tp).
  int64_t etp = 0;

  auto operator<=>(const Knobs&) const = default;
};

// The parts of the space to search. Empty lists mean "everything valid"; the defaults leave out
// settings the simulator can only cost as equal or worse (gpipe: 1F1B's time with more memory;
// zero3: costed as fsdp; materialized attention).
struct SpaceOptions {
  std::vector<int64_t> tp, pp, cp, ep, vp, micro_batch;
  // MoE models: folded shapes (parallel.etp) are searched with these expert TP degrees, besides
  // the unfolded ones; empty: etp 1 and etp = tp (Megatron-core's folding recipes run expert TP
  // 1 with attention TP > 1). Given, only folded shapes with these degrees are searched.
  std::vector<int64_t> etp;
  std::vector<pb::Sharding> sharding = {pb::SHARDING_NONE, pb::SHARDING_ZERO1, pb::SHARDING_ZERO2,
                                        pb::SHARDING_FSDP, pb::SHARDING_HSDP};
  // In the order screening tries them, least recomputation first: Megatron's selective (the
  // attention core), torchtitan's op-level selective checkpointing (every non-matmul op), full.
  std::vector<pb::Recompute> recompute = {pb::RECOMPUTE_NONE, pb::RECOMPUTE_SELECTIVE,
                                          pb::RECOMPUTE_SELECTIVE_OP, pb::RECOMPUTE_FULL};
  std::vector<pb::PipelineSchedule> schedules = {pb::PIPELINE_SCHEDULE_ONE_F_ONE_B,
                                                 pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B};
  // Gradient/parameter bucket sizes to try (0 = the simulator's default), bytes.
  std::vector<double> bucket_bytes = {0, 25.0 * 1024 * 1024, 200.0 * 1024 * 1024};
  // Rank placements to try ("" = tp,cp,dp,pp); TP stays innermost.
  std::vector<std::string> placements = {"", "tp,cp,pp,dp", "tp,dp,cp,pp"};
  // Bounds of the default ranges; an explicit `micro_batch` or `vp` list is searched as given.
  int64_t max_micro_batch = 8;
  int64_t max_vp = 4;
  int64_t max_cp = 16;
  // TP beyond one NVLink domain is allowed only when asked (the simulator costs it, nobody runs
  // it).
  bool tp_across_nvlink = false;
  // Sequence parallelism whenever tp > 1 (it saves memory and the simulator costs its collectives
  // as the all-reduce's halves), or both ways.
  bool sp_both_ways = false;
  // Heterogeneous clusters: also stages with their own tp and dp (one degree pair per node
  // group, each group hosting whole stages), besides shapes whose stages all share the degrees.
  bool stage_degrees = true;
  // ... with at most this many stages (unless `pp` lists them): every stage count per group
  // multiplies with every tp per group, so the deep pipelines of large clusters would swamp
  // the search (llama3-70b on mixed-a100-h100 x 32 nodes: up to 2,048 shapes without it).
  int64_t max_stage_degrees_pp = 8;
};

// A shape: the degrees and where the stages run; the rest of the knobs are "settings".
struct Shape {
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vp = 1;
  std::vector<std::string> stage_groups;
  std::vector<int64_t> stage_tp, stage_dp;  // as in Knobs
  int64_t etp = 0;                          // as in Knobs
  auto operator<=>(const Shape&) const = default;
};

// The shape of a point.
Shape shape_of(const Knobs& k);

// The space for one job: enumerates shapes and settings and turns knobs into plan files. Safe to
// share between threads (the layer-split cache is guarded).
class PlanSpace {
 public:
  PlanSpace(PlanningJob job, SpaceOptions options);

  const PlanningJob& job() const { return job_; }
  const SpaceOptions& options() const { return options_; }
  int64_t devices() const { return devices_; }
  bool heterogeneous() const { return groups_.size() > 1; }

  // Every shape whose degrees multiply to the cluster's devices and pass the divisibility rules,
  // in a fixed order.
  std::vector<Shape> shapes() const;
  // Micro-batch sizes valid for `shape` (dividing global_batch / dp, at most max_micro_batch,
  // interleaving's multiple-of-pp rule), ascending.
  std::vector<int64_t> micro_batches(const Shape& shape) const;
  // Every full point of the space for one shape, in a fixed order.
  std::vector<Knobs> settings(const Shape& shape) const;
  // The knobs the screening pass starts a shape from: sp on, default placement and buckets,
  // overlap on (TP communication overlap too, where sp is); sharding, recompute and micro-batch as
  // given.
  Knobs seed(const Shape& shape, int64_t micro_batch, pb::Sharding sharding, int64_t shard_group,
             pb::Recompute recompute) const;

  // Whether moe_a2a_overlap may be on for `k`: an MoE model, ep > 1, interleaving when pp > 1, no
  // full recompute (the plan rules), and no FSDP-style sharding (whose gathers the des engine
  // does not place in the merged order, so the des ranking could not price the plan).
  bool a2a_overlap_allowed(const Knobs& k) const;

  // The plan file for `k`: base fields plus the knobs, with layers_per_stage filled when the
  // split is uneven (pp x vp not dividing the layers, a balanced split asked for, or stages on
  // different devices).
  pb::Plan plan(const Knobs& k) const;

 private:
  // (ep, etp) pairs a (tp, cp, dp) shape may use: unfolded (etp 0) and folded.
  std::vector<std::pair<int64_t, int64_t>> expert_layouts(int64_t tp, int64_t cp, int64_t dp) const;
  struct NodeGroupInfo {
    std::string name;
    int64_t devices = 0;
    double speed = 0;  // peak FLOP/s of its device at the job's precision
  };
  std::vector<std::vector<std::string>> stage_assignments(int64_t pp, int64_t per_stage) const;
  // Heterogeneous clusters: shapes whose node groups' stages have their own tp and dp.
  void staged_shapes(std::vector<Shape>& out) const;
  std::vector<int64_t> layer_split(const Knobs& k) const;

  PlanningJob job_;
  SpaceOptions options_;
  int64_t devices_ = 0;
  int64_t domain_ = 1;  // devices of one NVLink domain
  std::vector<NodeGroupInfo> groups_;
  std::vector<double> layer_cost_;  // FLOPs of each decoder layer, one micro-batch sequence
  double embed_cost_ = 0, head_cost_ = 0;
  struct Cache;
  std::shared_ptr<Cache> cache_;
};

// HSDP shard group sizes for a dp degree: divisors of dp in (1, dp) that are powers of two.
std::vector<int64_t> hsdp_groups(int64_t dp);

// "tp8 pp4 dp32 sp mbs1 zero1 recompute=selective ..." — stable text, also the memo key.
std::string knob_key(const Knobs& k);

// The dtype name the compute model prices a precision at ("bf16" for bf16 and unspecified).
std::string precision_dtype(pb::Precision precision);

// Devices in the cluster's smallest NVLink domain (a node, or domain_nodes nodes; 1 without one).
int64_t nvlink_domain_size(const pb::ClusterSpec& cluster);

}  // namespace orrery::planner
