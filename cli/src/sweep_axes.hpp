// What `orrery sweep --vary NAME=V1,V2,...` may vary: any flag of the plan (nodes, tp,
// global-batch, seq, model, precision...: applied as if given on the command line, with that
// flag's own checks), or the cluster itself: its device type and the network's or the intra-node
// device link's bandwidth and latency, scaled.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "orrery/pb/cluster.pb.h"
#include "plan_args.hpp"

namespace orrery::cli {

struct SweepAxis {
  std::string name;                 // "nodes", "nic-bandwidth"
  std::vector<std::string> values;  // as written
  bool changes_cluster = false;     // a cluster axis, not a plan flag
};

// The axes of the --vary texts, one or two. InputError naming --vary and the reason for an
// unknown name (with the nearest), an empty or repeated value, a scale that is not a positive
// number, an axis varied twice, or a plan flag that `cmd` was also given (vary it or fix it).
std::vector<SweepAxis> parse_axes(const std::vector<std::string>& texts, const CLI::App& cmd);

// `value` of a plan-flag axis set in `args` as the flag "--NAME=value" would set it.
void apply_plan_axis(const SweepAxis& axis, const std::string& value, PlanArgs& args);

// `value` of a cluster axis applied to `cluster` (after it was loaded and sized).
void apply_cluster_axis(const SweepAxis& axis, const std::string& value, pb::ClusterSpec& cluster);

}  // namespace orrery::cli
