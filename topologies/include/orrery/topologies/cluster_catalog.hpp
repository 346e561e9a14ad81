// Cluster specs by name or file: the built-in presets (topologies/presets/clusters/*.yaml,
// compiled in; `local` is discovered from this machine), sizing with --nodes, and validation.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orrery/pb/cluster.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {

std::vector<std::string> preset_names();

// A preset by name ("dgx-h100", ..., "local"); InputError with a suggestion when unknown.
pb::ClusterSpec preset(std::string_view name);

// A preset name, or a file when `name_or_file` contains '/' or ends in .yaml/.yml/.json. When
// `nodes` is given the cluster is resized (see resize). The result is validated.
pb::ClusterSpec load_cluster(std::string_view name_or_file, std::optional<int64_t> nodes = {},
                             SourceMap* where = nullptr);

// Sizes a cluster to `nodes` nodes. One node group: its count becomes `nodes`. Several groups:
// `nodes` must be a multiple of the current total and every group scales by the same factor
// (a mixed preset keeps its mix). InputError otherwise.
void resize(pb::ClusterSpec& cluster, int64_t nodes);

// Semantic checks beyond the schema: references resolve, degrees fit the fabric, bandwidths
// present where the kind needs them... Throws InputError naming the field through `where`.
void validate_cluster(const pb::ClusterSpec& cluster, const SourceMap& where);

// Totals.
int64_t total_nodes(const pb::ClusterSpec& cluster);
int64_t total_devices(const pb::ClusterSpec& cluster);

}  // namespace orrery::topologies
