// Export of an ExecGraph to Chakra execution traces that ASTRA-sim runs, as one folder: one file
// per rank, `trace.<rank>.et` (ASTRA-sim's --workload-configuration is `<folder>/trace`), holding a
// GlobalMetadata message and then one Node per graph node, each preceded by its varint32 length,
// and `comm_groups.json`, ASTRA-sim's
// --comm-group-configuration file ({"<group id>": [ranks]}). Attributes carry the value types
// Chakra's reference feeder reads: comm_type, comm_size and num_ops int64, tensor_size uint64,
// comm_src, comm_dst and comm_tag int32, pg_name the group id as a string (orrery's process group
// id + 1: ASTRA-sim takes "0" for every rank), is_cpu_op bool. Durations come from the graph's
// timeline (duration_s, in whole microseconds, at least 1 for a node that took any time).
// Same-stream order, implicit in orrery's graph, becomes explicit ctrl_deps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "orrery/pb/chakra_et.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery {

// Writes every rank of `graph` and the comm-group file as the folder `folder`, all or none (a
// temporary folder renamed into place); returns the files written (the ranks', then the
// comm-group file). An existing `folder` is replaced only when `overwrite` and only when it holds
// nothing but an earlier export's files (InputError otherwise).
// Throws InputError, naming the rank and node, for what ASTRA-sim could not run: a rank missing
// from 0..world_size-1, a compute (or broadcast) node without duration_s, a collective kind
// ASTRA-sim does not implement (reduce, barrier), a collective on a group not in the graph or
// not holding the rank, a node on a stream the rank does not have.
std::vector<std::filesystem::path> write_chakra(const pb::ExecGraph& graph,
                                                const std::filesystem::path& folder,
                                                bool overwrite);

// `<folder>/trace`: ASTRA-sim's --workload-configuration for an export in `folder`.
std::filesystem::path chakra_workload_prefix(const std::filesystem::path& folder);
// `<folder>/trace.<rank>.et`.
std::filesystem::path chakra_rank_path(const std::filesystem::path& folder, int64_t rank);
// `<folder>/comm_groups.json`: ASTRA-sim's --comm-group-configuration.
std::filesystem::path chakra_comm_groups_path(const std::filesystem::path& folder);

struct ChakraRank {
  chakra::GlobalMetadata metadata;
  std::vector<chakra::Node> nodes;
};

// Reads one rank's file back (for tests and `orrery report`). Throws InputError when the file
// is not a valid Chakra trace.
ChakraRank read_chakra(const std::filesystem::path& file);

}  // namespace orrery
