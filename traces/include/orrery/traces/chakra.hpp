// Export of an ExecGraph to Chakra execution traces: one file per rank, `<prefix>.<rank>.et`,
// holding a GlobalMetadata message and then one Node per graph node, each preceded by its varint32
// length. Communication is described with Chakra's named attributes (comm_type, comm_size,
// comm_src, comm_dst, comm_tag, pg_name), compute with num_ops and tensor_size, as ASTRA-sim reads
// them. Same-stream order, implicit in orrery's graph, becomes explicit ctrl_deps.
#pragma once

#include <filesystem>
#include <vector>

#include "orrery/pb/chakra_et.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery {

// Writes every rank of `graph`; returns the files written. Refuses to overwrite existing files
// unless `overwrite`.
std::vector<std::filesystem::path> write_chakra(const pb::ExecGraph& graph,
                                                const std::filesystem::path& prefix,
                                                bool overwrite);

struct ChakraRank {
  chakra::GlobalMetadata metadata;
  std::vector<chakra::Node> nodes;
};

// Reads one rank's file back (for tests and `orrery report`). Throws InputError when the file
// is not a valid Chakra trace.
ChakraRank read_chakra(const std::filesystem::path& file);

}  // namespace orrery
