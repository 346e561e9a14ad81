// Chrome trace JSON that opens in Perfetto (ui.perfetto.dev) and chrome://tracing: a process per
// rank, a thread per stream, a complete event per timed node, and flow arrows from each send to
// its receive and from each dependency on another track. Only nodes with start_s and duration_s
// set are drawn.
//
// What makes the file usable rather than merely valid:
// - times are whole nanoseconds: start and end are each rounded once and the duration is their
//   difference, so back-to-back slices touch and never overlap by a rounding step;
// - slices that overlap on one stream without nesting (concurrent collectives on a communication
//   stream) go to extra tracks of that stream ("comm (2)"), so every track nests properly;
// - a slice's name is its op with the layer, micro-batch, bucket and chunk taken out
//   ("fwd.attn.qkv" for "L3.mb2.fwd.attn.qkv"); those go to args (with the node's full name), so
//   grouping by name in Perfetto groups by op.
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

// The op a node name stands for, with its indices ("L3", "mb2", "bucket5", "chunk1") removed and
// appended to `indices` as (arg name, value): "L3.mb2.fwd.attn.qkv" -> "fwd.attn.qkv".
std::string perfetto_op_name(const std::string& node_name,
                             std::vector<std::pair<std::string, long long>>* indices);

}  // namespace orrery
