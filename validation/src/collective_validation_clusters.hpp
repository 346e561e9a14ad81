// Maps a measured nccl-tests table to a cluster like the one it ran on, and the group of devices
// it used.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective_validation_read.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::validation::detail {

struct MappedCluster {
  std::unique_ptr<topologies::Topology> topology;  // null when the table cannot be mapped
  std::vector<int64_t> devices;                    // the table's ranks, in rank order
  std::string description;
  std::string skip_reason;
};

MappedCluster map_cluster(const MeasuredTable& table);

}  // namespace orrery::validation::detail
