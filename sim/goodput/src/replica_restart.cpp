#include "orrery/sim/replica_restart.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "orrery/plan/rank_layout.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::sim {
namespace {

// dp indices per complete copy of the state, or 0 with the reason when there is none.
int64_t replica_width(const plan::ResolvedPlan& plan, std::string& why_not) {
  const int64_t dp = plan.degrees.dp;
  if (!plan.uniform_stages()) {
    why_not = "the plan's pipeline stages have their own dp degrees: replicas are not whole";
    return 0;
  }
  if (plan.degrees.ep > 1) {
    why_not = "expert parallelism spreads the experts over data-parallel ranks (ep " +
              std::to_string(plan.degrees.ep) + "): no dp rank group holds every expert";
    return 0;
  }
  switch (plan.sharding()) {
    case pb::SHARDING_NONE:
      return 1;
    case pb::SHARDING_HSDP:
      return plan.plan.shard_group_size();
    default:
      why_not = "sharding " +
                enum_value_name(*pb::Sharding_descriptor()->FindValueByNumber(plan.sharding())) +
                " spreads the training state over all " + std::to_string(dp * plan.degrees.cp) +
                " data-parallel ranks: no replica holds a whole copy (sharding none or hsdp do)";
      return 0;
  }
}

// Bytes per second one node moves over its scale-out NICs (its PCIe link per rank without NICs:
// a single-node cluster copies between its own GPUs' hosts).
double node_network_bytes_per_s(const plan::ResolvedPlan& plan, int node_group, int64_t ranks) {
  const std::string& type = plan.cluster.node_groups(node_group).node_type();
  for (const auto& t : plan.cluster.node_types()) {
    if (t.name() != type) continue;
    const double nic =
        static_cast<double>(t.nic().count()) * t.nic().link().bandwidth_bytes_per_s();
    return nic > 0 ? nic
                   : static_cast<double>(ranks) * t.intra().pcie_link().bandwidth_bytes_per_s();
  }
  return 0;
}

}  // namespace

ReplicaRestarts replica_restarts(const plan::ResolvedPlan& plan,
                                 const topologies::Topology& topology,
                                 const CheckpointModel& checkpoint) {
  ReplicaRestarts r;
  const int64_t width = replica_width(plan, r.why_not);
  if (width == 0 || plan.degrees.dp / width < 2) {
    if (r.why_not.empty()) r.why_not = "one replica: dp / shard group is 1";
    r.ranks_per_replica = plan.world_size();
    return r;
  }
  r.replicas = plan.degrees.dp / width;
  r.ranks_per_replica = plan.world_size() / r.replicas;
  const plan::RankLayout layout = plan::rank_layout(plan);
  std::map<int64_t, std::set<int64_t>> replicas_on_node;
  std::map<int64_t, std::pair<int, int64_t>> ranks_on_node;  // node -> (node group, ranks)
  for (int64_t rank = 0; rank < plan.world_size(); ++rank) {
    const auto& device = topology.device(plan.device_of_rank[static_cast<size_t>(rank)]);
    replicas_on_node[device.node].insert(layout.coord(rank).dp / width);
    auto& [group, count] = ranks_on_node[device.node];
    group = device.node_group;
    ++count;
  }
  double sum = 0;
  for (const auto& [node, set] : replicas_on_node) sum += static_cast<double>(set.size());
  r.replicas_per_node = sum / static_cast<double>(replicas_on_node.size());
  // Every node of the restarted replica fetches its ranks' shards at once; the slowest paces it.
  for (const auto& [node, gc] : ranks_on_node) {
    const double bytes = static_cast<double>(gc.second) * checkpoint.rank_bytes;
    const double bw = node_network_bytes_per_s(plan, gc.first, gc.second);
    if (bw > 0) r.recovery_s = std::max(r.recovery_s, bytes / bw + checkpoint.snapshot_s);
  }
  // The cross-replica group is re-formed among its R members, priced as the job's process-group
  // initialization (storage.process_group_init_s and _per_rank_s) at R ranks.
  r.regroup_s = checkpoint.process_group_init_fixed_s +
                checkpoint.process_group_init_per_rank_s * static_cast<double>(r.replicas);
  return r;
}

}  // namespace orrery::sim
