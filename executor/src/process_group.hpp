// c10d process groups of one rank, built from the plan's placement: a group per parallel
// dimension the rank takes part in (size-1 dimensions get none), Gloo when the rank trains on the
// CPU and NCCL on a GPU (run_device.hpp), all rendezvousing through one TCPStore under a
// per-group prefix.
#pragma once

#include <cstdint>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include "orrery/executor/rank_env.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::executor {

// A group's collectives. libtorch 1.13's ProcessGroupGloo/NCCL are ProcessGroups; from 2.0 they
// are Backends (a ProcessGroup dispatches to one per device type), with the same collective
// methods, which is all the executor calls.
#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif
using GroupPtr = c10::intrusive_ptr<Group>;

// A group as an autograd function carries it through its context (saved_data holds no pointers):
// its address as an integer. The groups outlive training, so the pointer stays valid.
inline int64_t as_handle(const GroupPtr& g) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(g.get()));
}
inline Group* from_handle(int64_t h) { return reinterpret_cast<Group*>(static_cast<intptr_t>(h)); }

// Which c10d implementation carries the rank's tensors: Gloo for CPU tensors, NCCL for CUDA ones
// (NCCL only in an executor built with CUDA).
enum class GroupBackend { kGloo, kNccl };

struct RankGroups {
  c10::intrusive_ptr<c10d::Store> store;
  // Null when the job has one rank. Gloo whatever the backend: it only runs the end-of-job
  // barrier, which carries no tensor (NCCL's would guess a device from the rank).
  GroupPtr world;
  GroupPtr tp;  // null when tp == 1
  // Every replica of the dense weights, which reduces their gradients (and ZeRO/FSDP shard them):
  // the dp group, or under context parallelism the dp x cp ranks (the lowering's gradient group).
  // Null when it has one rank.
  GroupPtr dp;
  GroupPtr cp;  // the context-parallel ring; null when cp == 1
  GroupPtr pp;  // null when pp == 1
  // Tied embeddings with pp > 1: the first and last stage of this rank's pipeline (they both hold
  // the embedding matrix and sum its gradient); null elsewhere.
  GroupPtr embedding;
  // MoE: the expert-parallel group (null when ep == 1) and this rank's index in it; the
  // expert-data-parallel group that reduces expert gradients (the dp group when ep == 1; null
  // when it has one rank).
  GroupPtr ep, edp;
  int64_t ep_index = 0;
  // HSDP (sharding hsdp): the layout's shard group (shard_group_size consecutive dp ranks with
  // their CP ranks, which FSDP shards over) and replica group (the ranks holding the same shard,
  // which all-reduce its gradients). Without HSDP the shard group is dp and the replica group
  // null.
  GroupPtr dp_shard, dp_replica;
  plan::RankCoord coord;
};

RankGroups make_groups(const RankEnv& env, const plan::RankLayout& grid, double timeout_s,
                       bool tied_embeddings, GroupBackend backend = GroupBackend::kGloo);

// In-place sum over `group` (no-op for a null group).
void all_reduce_sum(const GroupPtr& group, at::Tensor& tensor);

}  // namespace orrery::executor
