// Routes between devices: shortest paths (fewest hops, then lowest latency) with ECMP, each
// route's latency and bottleneck bandwidth, and bisection bandwidth by max-flow. Devices never
// forward traffic (a route leaves a device only at its source), and two devices of one NVLink
// fabric (DeviceInfo::nvlink_domain) use NVLink edges only.
#pragma once

#include <vector>

#include "orrery/topologies/topology.hpp"

namespace orrery::topologies {

struct Route {
  std::vector<Edge> edges;
  double latency_s = 0;               // sum of the links' latencies
  double bottleneck_bytes_per_s = 0;  // the slowest link on the path
};

// All equal-cost shortest paths from device `src` to device `dst` (global indices): the
// fewest-hop paths whose latency equals the lowest, at most `max_paths` of them in a
// deterministic order (graph order). Empty when unreachable; src == dst gives none.
std::vector<Route> ecmp_routes(const Topology& topology, int64_t src, int64_t dst,
                               size_t max_paths = 64);

// The route the simulator uses for a flow between two devices: the first ECMP route, or the
// one chosen by `flow_hash` modulo the number of routes (deterministic spreading). src == dst
// gives an empty route (no edges, latency 0, bottleneck 0).
Route route(const Topology& topology, int64_t src, int64_t dst, uint64_t flow_hash = 0);

// Bandwidth one flow from src to dst can get alone: the best bottleneck over the ECMP routes
// (0 when src == dst).
double pair_bottleneck_bandwidth(const Topology& topology, int64_t src, int64_t dst);

// Bandwidth between two device sets all sending at once: max-flow from a super-source on
// `sources` to a super-sink on `sinks` (bytes/s, one direction).
double max_flow_bandwidth(const Topology& topology, const std::vector<int64_t>& sources,
                          const std::vector<int64_t>& sinks);

// Bisection bandwidth: max-flow between the first and the second half of the devices in index
// order (which for the fabrics orrery builds is the worst balanced cut: it splits at the top
// tier). Zero for one device.
double bisection_bandwidth(const Topology& topology);

}  // namespace orrery::topologies
