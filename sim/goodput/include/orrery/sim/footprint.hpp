// What a plan occupies of its cluster, counted per component that can fail: the failure rates of
// `orrery goodput` scale with these counts.
#pragma once

#include <cstdint>

#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim {

struct Footprint {
  int64_t gpus = 0;      // ranks (one device each)
  int64_t hosts = 0;     // nodes holding at least one rank
  int64_t nics = 0;      // scale-out NICs of those nodes
  int64_t links = 0;     // NIC-to-leaf links, one per NIC
  int64_t switches = 0;  // fabric switches, the plan's share of them (nodes used / nodes)
};

Footprint footprint(const plan::ResolvedPlan& plan, const topologies::Topology& topology);

}  // namespace orrery::sim
