// Restarting one data-parallel replica instead of the whole job. Fault-tolerant data
// parallelism (torchft's HSDP/DDP; its "Lighthouse" quorum) keeps the healthy replicas training
// while a failed one restarts and copies its state from a live peer: the failure costs the
// survivors a re-formed replica group and the step in flight, and the job k/R of its throughput
// while k of its R replicas are down. Only a plan whose replicas each hold a whole copy of the
// training state can do this: sharding none (every dp rank group) or HSDP (each shard group).
#pragma once

#include <cstdint>
#include <string>

#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

struct ReplicaRestarts {
  int64_t replicas = 1;           // R: complete copies of the training state
  int64_t ranks_per_replica = 0;  // world size / R
  double replicas_per_node = 1;   // k: mean distinct replicas among a used node's ranks
  double recovery_s = 0;          // a restarted replica's nodes fetch their shards from a peer
  double regroup_s = 0;           // the survivors re-form the cross-replica process group
  std::string why_not;            // set when replicas == 1: why a replica cannot restart alone

  bool possible() const { return replicas > 1; }
};

ReplicaRestarts replica_restarts(const plan::ResolvedPlan& plan,
                                 const topologies::Topology& topology,
                                 const CheckpointModel& checkpoint);

}  // namespace orrery::sim
