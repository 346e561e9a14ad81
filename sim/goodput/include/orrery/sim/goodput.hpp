// Goodput of a long run: the fraction of wall time that trains, given a step time, the plan's
// failure rates and its checkpoint model. Two answers that check each other:
//   closed form  exponential failures with restarts that can fail themselves (Daly 2006): the
//                expected wall time of one checkpoint interval, and the interval that minimizes it
//                (with Young's and Daly's first-order formulas for reference);
//   Monte Carlo  a seeded simulation of whole runs: failures by cause, lost work, hang detection,
//                restarts, hot spares taken and repaired, asynchronous saves not yet persisted.
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/failure_model.hpp"

namespace orrery::sim {

struct RunModel {
  double step_s = 0;  // including the straggler factor
  FailureRates failures;
  CheckpointModel checkpoint;
};

// Expected restart time over the causes, weighted by their rates (hangs add their detection; a
// lost node takes a spare whenever the cluster has any).
double mean_restart_s(const RunModel& run);

// Expected fraction of wall time spent on useful steps when checkpointing every `interval_s` of
// training (an asynchronous save's background write adds to the work a failure can lose).
double closed_form_goodput(const RunModel& run, double interval_s);

struct CheckpointInterval {
  int64_t steps = 0;
  double interval_s = 0;  // steps x step_s
  double goodput = 0;     // closed form at this interval
};

// The step count maximizing the closed-form goodput; an asynchronous save's next snapshot waits
// for the previous one to persist, so the interval is at least that long.
CheckpointInterval optimal_interval(const RunModel& run);
CheckpointInterval interval_of(const RunModel& run, int64_t steps);
double young_interval_s(double checkpoint_s, double mtbf_s);
double daly_interval_s(double checkpoint_s, double mtbf_s);

struct MonteCarloResult {
  int64_t trials = 0;
  double target_work_s = 0;    // failure-free training time to reach the target
  std::vector<double> wall_s;  // per trial, sorted
  double mean_wall_s = 0;
  double goodput = 0;  // target_work_s / mean_wall_s
  double mean_interruptions = 0;
  double mean_lost_work_s = 0;    // training redone after rollbacks
  double mean_spares_missed = 0;  // node losses that found no spare (requeued)
};

// Runs `trials` runs to `target_work_s` of training, checkpointing every `steps` (the run ends
// with a checkpoint). Same seed, same result, bit for bit.
MonteCarloResult monte_carlo(const RunModel& run, int64_t steps, double target_work_s,
                             int64_t trials, uint64_t seed);

// Linear interpolation between order statistics of sorted `v` (q in [0, 1]).
double quantile(const std::vector<double>& sorted, double q);

}  // namespace orrery::sim
