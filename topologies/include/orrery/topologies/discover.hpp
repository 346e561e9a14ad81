// `orrery topo discover`: this machine as a ClusterSpec (one node), from hwloc (cores, caches,
// memory, PCIe NICs) and, when an NVIDIA GPU is present, nvidia-smi (GPU type, count, NVLink
// topology). Without a GPU the devices are the CPU cores (the `local` preset).
#pragma once

#include "orrery/pb/cluster.pb.h"

namespace orrery::topologies {

// Throws EnvironmentError when hwloc cannot read the machine.
pb::ClusterSpec discover_local_machine();

}  // namespace orrery::topologies
