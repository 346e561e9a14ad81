// Goodput of a long run: the fraction of wall time that trains, given a step time, the plan's
// failure rates and its checkpoint model. Two answers that check each other:
//   closed form  exponential failures with restarts that can fail themselves (Daly 2006): the
//                expected wall time of one checkpoint interval, and the interval that minimizes it
//                (with Young's and Daly's first-order formulas for reference);
//   Monte Carlo  a seeded simulation of whole runs: failures by cause, lost work, hang detection,
//                restarts, hot spares taken and repaired, asynchronous saves not yet persisted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/failure_model.hpp"
#include "orrery/sim/replica_restart.hpp"

namespace orrery::sim {

// A component that keeps running, slower, until it is drained or recovers: a thermally throttled
// GPU, a link or NIC at reduced bandwidth. The synchronous step runs at its pace meanwhile.
struct Degradation {
  std::string component;  // "gpu", "link", ...
  double rate_per_s = 0;  // episodes per second over the plan's footprint
  double step_ratio = 1;  // the step while degraded over the healthy one (the straggler model's)
  // Detection: a per-step straggler detector drains the node after this many slow steps (the job
  // saves a checkpoint and restarts without it, as after a lost node); 0: no detector, and the
  // episode lasts duration_s of wall time and ends by itself.
  int64_t detect_steps = 0;
  double duration_s = 0;
};

struct RunModel {
  double step_s = 0;  // including the straggler factor
  FailureRates failures;
  CheckpointModel checkpoint;
  ReplicaRestarts replicas;
  // Restart only the failed replica (`--restart-scope replica`) when the plan's replicas allow it.
  bool restart_replicas = false;
  std::vector<Degradation> degradations;
};

// Wall time one degradation episode loses to slow steps: detect_steps x (ratio - 1) steps with a
// detector, duration_s x (1 - 1 / ratio) without one.
double degradation_slow_s(const RunModel& run, const Degradation& d);
// Wall time its drain costs with a detector (a blocking checkpoint, then `restart_s`); 0 without.
double degradation_drain_s(const RunModel& run, const Degradation& d, double restart_s);
// Expected fraction of wall time lost to degradations, slow steps and drains (first order in the
// rates; a drain's restart takes a spare when the cluster has any).
double degradation_loss_fraction(const RunModel& run);

// Whether a failure of `c` restarts the whole job from its checkpoint (always, unless replicas
// restart alone and `c` is not job-wide).
bool restarts_job(const RunModel& run, const ComponentFailures& c);
// Rate of the failures that restart the whole job.
double job_failure_rate_per_s(const RunModel& run);
// A replica's downtime after a failure of `c`, once detected: the usual restart (a spare when the
// cluster has any) without the checkpoint load, plus the copy of its state from a live peer.
double replica_downtime_s(const RunModel& run, const ComponentFailures& c);
// The same after a restart of `restart_s` (CheckpointModel::restart_s, the spare decided).
double replica_downtime_after_s(const RunModel& run, bool node_lost, double restart_s);
// Wall time one replica restart costs the job: the survivors wait for a hang's watchdog, the
// regrouping and redo the step in flight (`in_flight_s` of it done; half a step on average), and
// k of the R replicas stay out for `downtime_s` (the job trains at (R - k) / R meanwhile).
double replica_restart_cost_s(const RunModel& run, const ComponentFailures& c, double in_flight_s,
                              double downtime_s);

// Expected restart time over the causes that restart the job, weighted by their rates (hangs add
// their detection; a lost node takes a spare whenever the cluster has any).
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
  double mean_lost_work_s = 0;       // training redone after rollbacks
  double mean_spares_missed = 0;     // node losses that found no spare (requeued)
  double mean_replica_restarts = 0;  // failures that restarted one replica, not the job
  double mean_degradations = 0;      // degradation episodes
  double mean_slow_s = 0;            // wall time lost to slow steps while degraded
  double mean_drain_s = 0;           // wall time lost to draining degraded nodes
};

// Runs `trials` runs to `target_work_s` of training, checkpointing every `steps` (the run ends
// with a checkpoint). Same seed, same result, bit for bit.
MonteCarloResult monte_carlo(const RunModel& run, int64_t steps, double target_work_s,
                             int64_t trials, uint64_t seed);

// Linear interpolation between order statistics of sorted `v` (q in [0, 1]).
double quantile(const std::vector<double>& sorted, double q);

}  // namespace orrery::sim
