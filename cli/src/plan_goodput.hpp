// `orrery plan --objective goodput`: the searched plans ranked by what they train per day once
// failures, checkpoints and restarts are counted (sim/plan_run.hpp), not by their step alone.
#pragma once

#include <string>
#include <vector>

#include "orrery/pb/calibration.pb.h"
#include "orrery/planner/plan_space.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/goodput.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::cli {

struct PlanGoodput {
  double goodput = 0;          // closed form at the optimal checkpoint interval
  int64_t interval_steps = 0;  // that interval
  double tokens_per_day = 0;   // failure-free tokens/s, stragglers, then goodput
  int64_t replicas = 1;        // replicas that restart alone (1: every failure restarts the job)
};

// --restart-scope: "job" (false) or "replica" (true); anything else is refused.
bool parse_restart_scope(const std::string& text);

// A calibration profile's measured checkpoint storage for the goodput model (none when no
// --calibration was given or it measured none).
inline sim::MeasuredStorage measured_storage(const pb::CalibrationProfile& profile,
                                             const std::string& file) {
  if (file.empty() || !profile.has_checkpoint_storage()) return {};
  return {&profile.checkpoint_storage(), file};
}

// A number to three significant digits, for goodput messages.
std::string three_digits(double v);

// A run whose expected wall time is over 1000 times its training never reaches its target (the
// Monte Carlo simulation would not end): refused, naming what makes it so (`lead` opens the
// reason). One rule for `orrery goodput` and `orrery plan --objective goodput`.
void check_run_finishes(const sim::RunModel& run, const sim::CheckpointInterval& chosen,
                        const std::string& cluster, const std::string& lead = "");

// Reorders r.ranked by tokens per day (ties keep the step order), keeps the first `top`, and
// returns each kept plan's figures in the new order. `where` names the cluster in errors. Refused
// (check_run_finishes) when no plan reaches its target.
// `restart_replicas`: plans whose replicas each hold a whole copy of the state restart only the
// failed replica (the others restart the job, as without it).
std::vector<PlanGoodput> rank_by_goodput(const planner::PlanningJob& job,
                                         const topologies::Topology& topology,
                                         const std::string& where, planner::SearchResult& r,
                                         size_t top, const sim::MeasuredStorage& measured = {},
                                         bool restart_replicas = false);

}  // namespace orrery::cli
