// Where every NIC of a cluster plugs into the scale-out fabric, and how many switches of each
// tier there are: pure arithmetic on the spec, shared by validation (which reports a layout that
// cannot be built, naming the field) and by the graph builder (which trusts it).
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/pb/cluster.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies::detail {

// Leaf (or rail switch) ports: `down` towards NICs, `up` towards the next tier, with
// down / up == oversubscription in port counts and down + up == switch_radix.
struct LeafPorts {
  int64_t down = 0;
  int64_t up = 0;
};

struct FabricLayout {
  int tiers = 0;  // 0: no fabric, 2: leaf-spine, 3: pods under a core
  LeafPorts ports;
  std::vector<int64_t> leaf_of_nic;        // NICs numbered node by node, NIC by NIC
  std::vector<int64_t> first_nic_of_node;  // index into leaf_of_nic
  int64_t leaves = 0;
  bool rail = false;  // leaves are rail switches (name them so)
  int64_t rails = 0;  // rail_optimized: NICs per node
  // tiers == 2
  int64_t spines = 0;  // each leaf has up / spines links to every spine
  // tiers == 3: leaves are grouped into pods; each pod has `up` aggregation switches (one link
  // from every leaf of the pod to each), aggregation switch j of every pod joins core plane j.
  std::vector<int64_t> pod_of_leaf;
  int64_t pods = 0;
  double pod_oversubscription = 1;  // aggregation down : up bandwidth
};

// NICs per node, in global node order.
std::vector<int64_t> nics_per_node(const pb::ClusterSpec& cluster);

// Throws InputError through `where` when the fabric cannot be built as specified.
FabricLayout plan_fabric(const pb::ClusterSpec& cluster, const SourceMap& where);

}  // namespace orrery::topologies::detail
