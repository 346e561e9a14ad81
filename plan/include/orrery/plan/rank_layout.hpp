// Where each rank sits in the parallel grid and which process groups it belongs to. Ranks are
// numbered by the plan's placement order (innermost dimension varies fastest), so with the default
// "tp,cp,dp,pp" a TP group is consecutive ranks and lands inside a node.
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan {

struct RankCoord {
  int64_t tp = 0, cp = 0, dp = 0, pp = 0;
};

// Process-group kinds a rank takes part in.
enum class GroupKind {
  kTp,         // same cp, dp, pp
  kCp,         // same tp, dp, pp
  kDp,         // same tp, cp, pp
  kDpCp,       // same tp, pp: gradients of dense weights are reduced over dp x cp
  kPp,         // same tp, cp, dp
  kEp,         // MoE: ep consecutive ranks of the (dp, cp) plane with the same tp, pp
  kEdp,        // MoE: expert-data-parallel, same expert shard: reduces expert gradients
  kDpShard,    // FSDP's shard group: dp x cp (kDpCp), or with HSDP shard_group_size
               // consecutive dp ranks x cp
  kDpReplica,  // HSDP: the ranks of the same cp index holding the same shard
  // MoE parallel folding (Degrees::folded): the routed experts' tensor-parallel group. Without
  // folding the experts use the TP group and this group is the rank alone.
  kEtp,
};
// Folded plans regroup each stage's (tp, cp, dp) grid for the MoE layers as Megatron's expert
// rank generator does: position p = (dp x cp + cp) x tp + tp index (tp fastest, then cp, then
// dp), split as p = etp index + etp x (ep index + ep x edp index). kEtp groups are etp
// consecutive positions, kEp groups the positions with the same etp and edp index, kEdp those
// with the same etp and ep index.
const char* to_string(GroupKind kind);

class RankLayout {
 public:
  // `shard_group_size` (HSDP) splits each dp group into shards of that size; 0 means no HSDP.
  // `stages` (pp entries, ResolvedPlan::stage_degrees): stages with their own tp and dp; then
  // pp must be the outermost dimension, stage p holds the consecutive ranks after stage p - 1's,
  // numbered inside the stage by the placement of its own degrees, and there are no pp groups
  // (stages of different shapes have no rank-to-rank pipeline pairing; see lower.cpp).
  RankLayout(const Degrees& degrees, const std::vector<Dim>& placement,
             int64_t shard_group_size = 0, std::vector<Degrees> stages = {});

  int64_t world_size() const;
  const Degrees& degrees() const { return degrees_; }
  RankCoord coord(int64_t rank) const;
  int64_t rank(const RankCoord& coord) const;

  // Ranks of `kind`'s group that contains `rank`, in group-rank order.
  std::vector<int64_t> group(GroupKind kind, int64_t rank) const;
  // Position of `rank` in that group.
  int64_t index_in_group(GroupKind kind, int64_t rank) const;

  // All groups of all kinds with deterministic ids (kind-major, then by smallest rank), as they
  // appear in ExecGraph.process_groups; groups of size 1 are left out.
  std::vector<pb::ProcessGroup> process_groups() const;
  // Id of `rank`'s group of `kind` in process_groups(), -1 for a size-1 group.
  int64_t group_id(GroupKind kind, int64_t rank) const;

 private:
  // HSDP groups exist only when a shard group size was given.
  bool active(GroupKind kind) const;
  // Degrees of pipeline rank p (degrees_ unless the stages differ).
  const Degrees& at(int64_t p) const;
  // kEp, kEdp, kEtp of a folded plan (see Degrees::folded).
  std::vector<int64_t> folded_group(GroupKind kind, const RankCoord& c, const Degrees& d) const;
  // Stride and extent of `dim` in the grid of `d` (with stages: inside one stage, pp excluded).
  int64_t stride(Dim dim, const Degrees& d) const;
  int64_t extent(Dim dim, const Degrees& d) const;
  Degrees degrees_;
  std::vector<Dim> placement_;
  int64_t shard_ = 0;
  std::vector<Degrees> stages_;
  std::vector<int64_t> offset_;  // with stages: first rank of each stage, then the world size
};

// The layout of a resolved plan (its degrees, placement, HSDP group and stages).
RankLayout rank_layout(const ResolvedPlan& plan);

// The layout of a plan as written, before resolution: its degrees, placement order and HSDP
// groups (shard_group_size under sharding hsdp), without per-stage degrees. What the executor
// forms its process groups from (it refuses per-stage degrees, train_config.cpp), so that both
// sides place ranks and HSDP's shard and replica groups by one rule.
RankLayout layout_of(const pb::Plan& plan);

}  // namespace orrery::plan
