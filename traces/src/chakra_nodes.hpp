// One rank of an ExecGraph as Chakra nodes, with the attribute value types that ASTRA-sim's
// workload layer and Chakra's feeder read (see chakra.hpp). Private to traces/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orrery/pb/chakra_et.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::detail {

// ASTRA-sim's group id for each orrery process group id: orrery's id + 1, because ASTRA-sim
// reads pg_name "0" (and "") as "every rank", not as a group of the comm-group file. Throws
// InputError for a duplicate or negative id, or one past the int32 range ASTRA-sim parses.
struct ChakraGroup {
  int64_t id = 0;              // ASTRA-sim's
  std::vector<int64_t> ranks;  // sorted
};
std::map<int64_t, ChakraGroup> chakra_groups(const pb::ExecGraph& graph);

// Converts one rank. Throws InputError, naming the rank and the node, for what ASTRA-sim cannot
// replay: a stream index outside the rank's streams, a compute or broadcast node without a
// duration, a collective kind ASTRA-sim has no implementation of, a collective whose process
// group is not in the graph or does not hold the rank, a peer or tag outside int32.
std::vector<chakra::Node> chakra_nodes(const pb::RankGraph& rank,
                                       const std::map<int64_t, ChakraGroup>& groups);

}  // namespace orrery::detail
