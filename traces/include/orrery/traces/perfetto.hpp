// Chrome trace JSON that opens in Perfetto (ui.perfetto.dev) and chrome://tracing: a process per
// rank, a thread per stream, a complete event per timed node, and flow arrows from each send to
// its receive. Only nodes with start_s and duration_s set are drawn.
#pragma once

#include <string>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery {

struct TimelineSource {
  const pb::ExecGraph* graph = nullptr;
  // Prepended to process names ("predicted", "measured") when several graphs share one file.
  std::string label;
};

// Deterministic: the same graphs give the same bytes. Several sources are laid side by side
// (their process ids do not collide), e.g. a prediction next to a measurement.
std::string to_perfetto_json(const std::vector<TimelineSource>& sources);

}  // namespace orrery
