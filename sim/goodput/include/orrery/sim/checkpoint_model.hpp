// A plan's checkpoint: its size from the memory model (what each rank holds of the weights and
// optimizer state, per the sharding), the time to save it along the path device -> host ->
// local NVMe -> remote file system or object store, to load it back, and the restart around it.
#pragma once

#include <string>
#include <vector>

#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/failure_model.hpp"
#include "orrery/sim/footprint.hpp"

namespace orrery::sim {

struct CheckpointModel {
  double rank_bytes = 0;   // the largest per-rank shard
  double total_bytes = 0;  // distinct bytes: data-parallel replicas write one copy
  double node_bytes = 0;   // writes spread evenly over the plan's nodes
  double snapshot_s = 0;   // device -> host, every rank at once
  double local_s = 0;      // host -> local NVMe
  double remote_s = 0;     // -> remote store (the slowest of per node, aggregate, requests)
  bool async = false;
  double blocking_s = 0;    // training stops this long per checkpoint
  double background_s = 0;  // async: persisted this long after the snapshot
  double load_s = 0;        // remote store -> host -> device: a replacement node has no local copy
  double load_local_s = 0;  // local NVMe -> host -> device: a restart on the same nodes
  int64_t spare_nodes = 0;
  double spare_swap_s = 0, requeue_s = 0, repair_s = 0;
  double process_group_init_s = 0;  // at this plan's rank count
  double process_group_init_fixed_s = 0, process_group_init_per_rank_s = 0;  // its two terms
  double warmup_s = 0;
  std::vector<Setting> settings;

  // Restart after a failure that costs a node (with a spare or not) or none: everything but
  // the lost work.
  double restart_s(bool node_lost, bool spare) const;
};

// Storage bandwidths measured by `orrery calibrate` (CalibrationProfile.checkpoint_storage),
// used for each field the cluster file leaves out; `source` names the profile in the settings.
struct MeasuredStorage {
  const pb::CheckpointStorage* storage = nullptr;  // null: none
  std::string source;
};

// The reader has checked every storage field (positive, non-negative); what remains cannot be
// wrong, so this throws nothing of its own.
CheckpointModel checkpoint_model(const plan::ResolvedPlan& plan, const Footprint& footprint,
                                 const MeasuredStorage& measured = {});

}  // namespace orrery::sim
