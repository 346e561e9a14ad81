// Degradation episodes a cluster states (FailureModel.degradations, `orrery goodput`): which
// component degrades, how often, how much slower the step runs and how the episode ends. The
// checks here make a bad entry fail at load with its file, field and reason; sim/goodput prices
// the episodes.
#pragma once

#include <string>

#include "orrery/pb/cluster.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {

// Each entry names a known component once, states mean_interval_s and step_ratio (>= 1), and
// exactly one of detect_steps and duration_s.
void check_degradations(const pb::ClusterSpec& cluster, const SourceMap& where);

// "COMPONENT:mean_interval_s=T,step_ratio=R,detect_steps=N" (or duration_s=D instead of
// detect_steps; T and D take units, "2000 h"): the `--degradation` flag's text. Replaces the
// cluster's entry for that component (or adds one); the other entries stay. Throws InputError
// naming `flag` with the reason.
void set_degradation(pb::ClusterSpec& cluster, const std::string& text, const std::string& flag);

}  // namespace orrery::topologies
