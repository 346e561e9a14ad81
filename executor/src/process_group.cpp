#include "process_group.hpp"

#include <chrono>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "orrery/base/error.hpp"

#ifdef ORRERY_EXECUTOR_CUDA
#include "cuda_runtime.hpp"
#endif

namespace orrery::executor {
namespace {

std::string group_name(plan::GroupKind dim, const std::vector<int64_t>& members) {
  std::string name = std::string("pg/") + to_string(dim);
  for (int64_t m : members) name += "/" + std::to_string(m);
  return name;
}

GroupPtr make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                   const std::string& addr, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const bool loopback = addr == "127.0.0.1" || addr == "localhost";
  options->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                      : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank),
                                                     static_cast<int>(size), options);
}

// One group of `backend` under its own `prefix` of the job's store.
GroupPtr make_group(GroupBackend backend, const c10::intrusive_ptr<c10d::Store>& store,
                    const std::string& prefix, int64_t rank, int64_t size, const std::string& addr,
                    std::chrono::milliseconds timeout) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
#ifdef ORRERY_EXECUTOR_CUDA
  if (backend == GroupBackend::kNccl) return cuda::make_nccl_group(prefixed, rank, size, timeout);
#endif
  ORRERY_CHECK(backend == GroupBackend::kGloo, "NCCL groups in an executor built without CUDA");
  return make_gloo(prefixed, rank, size, addr, timeout);
}

std::string rendezvous_failed(const RankEnv& env, const std::string& why) {
  return "rank " + std::to_string(env.rank) + ": rendezvous at " + env.master_addr + ":" +
         std::to_string(env.master_port) + " failed: " + why;
}

}  // namespace

RankGroups make_groups(const RankEnv& env, const plan::RankLayout& grid, double timeout_s,
                       bool tied_embeddings, GroupBackend backend) {
  if (grid.world_size() != env.world_size) {
    throw base::InputError(
        "", 0, "WORLD_SIZE",
        "the job has " + std::to_string(env.world_size) +
            " ranks but the plan needs tp x cp x dp x pp = " + std::to_string(grid.world_size()));
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  RankGroups g;
  g.coord = grid.coord(env.rank);
  if (env.world_size == 1) return g;
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = env.rank == 0 && !env.agent_store;
  opts.numWorkers = static_cast<size_t>(env.world_size);
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    g.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    g.world = make_group(GroupBackend::kGloo, g.store, "pg/world", env.rank, env.world_size,
                         env.master_addr, timeout);
    const bool cp = grid.degrees().cp > 1;
    const plan::GroupKind replicas = cp ? plan::GroupKind::kDpCp : plan::GroupKind::kDp;
    for (plan::GroupKind dim :
         {plan::GroupKind::kTp, replicas, plan::GroupKind::kPp, plan::GroupKind::kCp}) {
      const auto members = grid.group(dim, env.rank);
      if (members.size() < 2) continue;
      const auto index = std::find(members.begin(), members.end(), env.rank) - members.begin();
      auto pg = make_group(backend, g.store, group_name(dim, members), index,
                           static_cast<int64_t>(members.size()), env.master_addr, timeout);
      (dim == plan::GroupKind::kTp   ? g.tp
       : dim == replicas             ? g.dp
       : dim == plan::GroupKind::kPp ? g.pp
                                     : g.cp) = pg;
    }
    const int64_t last = grid.degrees().pp - 1;
    if (tied_embeddings && last > 0 && (g.coord.pp == 0 || g.coord.pp == last)) {
      plan::RankCoord first_stage = g.coord, last_stage = g.coord;
      first_stage.pp = 0;
      last_stage.pp = last;
      const std::vector<int64_t> members = {grid.rank(first_stage), grid.rank(last_stage)};
      std::string name = "pg/embed";
      for (int64_t m : members) name += "/" + std::to_string(m);
      g.embedding =
          make_group(backend, g.store, name, g.coord.pp == 0 ? 0 : 1, 2, env.master_addr, timeout);
    }
    // MoE groups (the layout's ep and edp), created after the others in the same order on
    // every rank (a group with the dp group's members is the dp group).
    const auto ep_members = grid.group(plan::GroupKind::kEp, env.rank);
    const auto edp_members = grid.group(plan::GroupKind::kEdp, env.rank);
    auto moe_group = [&](const char* kind, const std::vector<int64_t>& members) -> GroupPtr {
      if (members.size() < 2) return {};
      if (members == grid.group(replicas, env.rank)) return g.dp;
      std::string name = std::string("pg/") + kind;
      for (int64_t m : members) name += "/" + std::to_string(m);
      const auto index = std::find(members.begin(), members.end(), env.rank) - members.begin();
      return make_group(backend, g.store, name, index, static_cast<int64_t>(members.size()),
                        env.master_addr, timeout);
    };
    g.ep = moe_group("ep", ep_members);
    g.ep_index = std::find(ep_members.begin(), ep_members.end(), env.rank) - ep_members.begin();
    g.edp = moe_group("edp", edp_members);
    // HSDP's shard and replica groups, last (without HSDP the layout's shard group is the dp
    // group and its replica group this rank alone: no new group).
    g.dp_shard = moe_group("dp_shard", grid.group(plan::GroupKind::kDpShard, env.rank));
    g.dp_replica = moe_group("dp_replica", grid.group(plan::GroupKind::kDpReplica, env.rank));
  } catch (const c10::Error& e) {
    throw base::EnvironmentError(rendezvous_failed(env, e.what_without_backtrace()));
  } catch (const std::runtime_error& e) {  // Gloo's own errors
    throw base::EnvironmentError(rendezvous_failed(env, e.what()));
  }
  return g;
}

void all_reduce_sum(const GroupPtr& group, at::Tensor& tensor) {
  if (!group) return;
  std::vector<at::Tensor> tensors{tensor};
  group->allreduce(tensors)->wait();
}

}  // namespace orrery::executor
