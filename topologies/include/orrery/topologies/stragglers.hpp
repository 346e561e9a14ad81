// Stragglers a cluster lists (ClusterSpec.stragglers): a GPU whose compute is slow, a NIC whose
// links to the fabric are degraded. The topology carries the degraded links' bandwidth (every
// router and the des engine's links see it); the des engine slows the slow GPU's compute
// (compute_factor); the analytic engine refuses a cluster with any (has_stragglers).
#pragma once

#include <cstdint>

#include "orrery/pb/cluster.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {

class Topology;

bool has_stragglers(const pb::ClusterSpec& cluster);

// The factor the compute of global device `device` takes longer by: the product of its
// stragglers' compute_factor (1 without one).
double compute_factor(const pb::ClusterSpec& cluster, int64_t device);

// Each straggler names a GPU or a NIC of this cluster, with its factor and nothing else.
void check_stragglers(const pb::ClusterSpec& cluster, const SourceMap& where);

// "gpu=N:F" (GPU N's compute F times as long) or "nic=NODE.I:F" (NIC I of node NODE at F of its
// bandwidth): the `--straggler` flag's text, appended to `cluster`. Throws InputError naming
// `flag`; the index ranges are checked with the cluster (check_stragglers).
void add_straggler(pb::ClusterSpec& cluster, const std::string& text, const std::string& flag);

}  // namespace orrery::topologies
