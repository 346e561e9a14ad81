#include <algorithm>
#include <cmath>
#include <random>

#include "orrery/sim/goodput.hpp"

namespace orrery::sim {
namespace {

// Draws from the engine's raw bits (not std:: distributions, whose algorithms differ between
// standard libraries), so a seed gives the same run everywhere.
class Draws {
 public:
  explicit Draws(uint64_t seed) : engine_(seed) {}
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }

 private:
  std::mt19937_64 engine_;
};

struct Trial {
  double t = 0;
  double durable_work = 0;  // the last checkpoint that reached the remote store
  double saved_work = 0;    // the last snapshot, durable at saved_at
  double saved_at = 0;
  double lost_work = 0;
  int64_t interruptions = 0;
  int64_t spares_missed = 0;
  int64_t replica_restarts = 0;
  int64_t degradations = 0;
  double slow_s = 0;
  double drain_s = 0;
  std::vector<double> spare_back;  // when each spare is available again
};

class Simulation {
 public:
  Simulation(const RunModel& run, double interval_s, uint64_t seed)
      : run_(run), interval_s_(interval_s), draws_(seed) {
    for (const auto& d : run.degradations) degradation_rate_ += d.rate_per_s;
  }

  Trial run_to(double target_work_s) {
    Trial tr;
    tr.spare_back.assign(static_cast<size_t>(run_.checkpoint.spare_nodes), 0.0);
    while (tr.saved_work < target_work_s) {
      const double work = std::min(interval_s_, target_work_s - tr.saved_work);
      double end = tr.t + work + run_.checkpoint.blocking_s;
      double failure = next_failure(tr.t);
      double degraded = next_degradation(tr.t);
      // Degradations and replica restarts push the interval's end back; a job restart ends it.
      const ComponentFailures* cause = nullptr;
      for (;;) {
        if (degraded < std::min(failure, end)) {
          end += degrade(tr, degraded);
          degraded = next_degradation(degraded);
        } else if (failure < end && !restarts_job(run_, *(cause = &pick_cause()))) {
          end += ride_out(*cause, tr, failure);
          failure = next_failure(failure);
        } else {
          break;
        }
      }
      if (failure >= end) {
        checkpoint(tr, work, end);
      } else {
        interrupt(tr, failure, *cause);
      }
    }
    // The last checkpoint counts once it is persisted.
    tr.t = std::max(tr.t, tr.saved_at);
    return tr;
  }

 private:
  double next_failure(double now) {
    const double rate = run_.failures.total_rate_per_s;
    return rate > 0 ? now + draws_.exponential(rate) : INFINITY;
  }

  // Draws nothing without degradations, so their absence leaves every other draw as it was.
  double next_degradation(double now) {
    return degradation_rate_ > 0 ? now + draws_.exponential(degradation_rate_) : INFINITY;
  }

  // A degradation episode starting at `when`, drawn by rate: the wall time it costs.
  double degrade(Trial& tr, double when) {
    double u = draws_.uniform() * degradation_rate_;
    const Degradation* d = &run_.degradations.back();
    for (const auto& c : run_.degradations) {
      if (u < c.rate_per_s) {
        d = &c;
        break;
      }
      u -= c.rate_per_s;
    }
    ++tr.degradations;
    const double slow = degradation_slow_s(run_, *d);
    const double drain = d->detect_steps > 0
                             ? degradation_drain_s(run_, *d, node_restart_s(true, tr, when + slow))
                             : 0;
    tr.slow_s += slow;
    tr.drain_s += drain;
    return slow + drain;
  }

  void checkpoint(Trial& tr, double work, double end) {
    if (tr.saved_at <= end) tr.durable_work = tr.saved_work;
    tr.saved_work += work;
    tr.saved_at = end + run_.checkpoint.background_s;
    tr.t = end;
  }

  // A failure at `when`: roll back to the last persisted checkpoint and restart, as often as
  // failures interrupt the restart itself.
  void interrupt(Trial& tr, double when, const ComponentFailures& first) {
    if (tr.saved_at <= when) tr.durable_work = tr.saved_work;
    // This interval's training so far, and a snapshot that had not yet persisted.
    tr.lost_work += std::min(when - tr.t, interval_s_) + (tr.saved_work - tr.durable_work);
    tr.saved_work = tr.durable_work;
    tr.saved_at = when;
    tr.t = when;
    for (const ComponentFailures* cause = &first;; cause = &pick_cause()) {
      ++tr.interruptions;
      const double restart = restart_after(*cause, tr);
      const double failure = next_failure(tr.t);
      if (failure >= tr.t + restart) {
        tr.t += restart;
        return;
      }
      tr.t = failure;
    }
  }

  const ComponentFailures& pick_cause() {
    double u = draws_.uniform() * run_.failures.total_rate_per_s;
    for (const auto& c : run_.failures.components) {
      if (u < c.rate_per_s) return c;
      u -= c.rate_per_s;
    }
    return run_.failures.components.back();
  }

  // A failure the surviving replicas ride out at `when`: the wall time it costs the job, with
  // the step in flight drawn uniformly.
  double ride_out(const ComponentFailures& cause, Trial& tr, double when) {
    ++tr.interruptions;
    ++tr.replica_restarts;
    const bool lost = cause.cost == FailureCost::kNodeLost;
    const double downtime = replica_downtime_after_s(run_, lost, node_restart_s(cause, tr, when));
    const double in_flight = draws_.uniform() * run_.step_s;
    tr.lost_work += in_flight;
    return replica_restart_cost_s(run_, cause, in_flight, downtime);
  }

  // Restart time after a failure of `cause` at tr.t; hangs first wait for the watchdog.
  double restart_after(const ComponentFailures& cause, Trial& tr) {
    const double detect = cause.cost == FailureCost::kHang ? run_.failures.hang_detection_s : 0;
    return detect + node_restart_s(cause, tr, tr.t);
  }

  // The restart's own time at `when`; a lost node takes the spare back soonest, which returns to
  // the pool after repair.
  double node_restart_s(const ComponentFailures& cause, Trial& tr, double when) {
    return node_restart_s(cause.cost == FailureCost::kNodeLost, tr, when);
  }
  double node_restart_s(bool node_lost, Trial& tr, double when) {
    const CheckpointModel& ck = run_.checkpoint;
    if (!node_lost) return ck.restart_s(false, false);
    auto spare = std::min_element(tr.spare_back.begin(), tr.spare_back.end());
    if (spare != tr.spare_back.end() && *spare <= when) {
      *spare = when + ck.repair_s;
      return ck.restart_s(true, true);
    }
    ++tr.spares_missed;
    return ck.restart_s(true, false);
  }

  const RunModel& run_;
  double interval_s_;
  Draws draws_;
  double degradation_rate_ = 0;
};

}  // namespace

MonteCarloResult monte_carlo(const RunModel& run, int64_t steps, double target_work_s,
                             int64_t trials, uint64_t seed) {
  MonteCarloResult r;
  r.trials = trials;
  r.target_work_s = target_work_s;
  Simulation sim(run, static_cast<double>(steps) * run.step_s, seed);
  double lost = 0, interruptions = 0, missed = 0, wall = 0, replica = 0;
  double degradations = 0, slow = 0, drain = 0;
  for (int64_t i = 0; i < trials; ++i) {
    const Trial tr = sim.run_to(target_work_s);
    r.wall_s.push_back(tr.t);
    wall += tr.t;
    lost += tr.lost_work;
    interruptions += static_cast<double>(tr.interruptions);
    missed += static_cast<double>(tr.spares_missed);
    replica += static_cast<double>(tr.replica_restarts);
    degradations += static_cast<double>(tr.degradations);
    slow += tr.slow_s;
    drain += tr.drain_s;
  }
  std::sort(r.wall_s.begin(), r.wall_s.end());
  const double n = static_cast<double>(std::max<int64_t>(1, trials));
  r.mean_wall_s = wall / n;
  r.goodput = r.mean_wall_s > 0 ? target_work_s / r.mean_wall_s : 0;
  r.mean_interruptions = interruptions / n;
  r.mean_lost_work_s = lost / n;
  r.mean_spares_missed = missed / n;
  r.mean_replica_restarts = replica / n;
  r.mean_degradations = degradations / n;
  r.mean_slow_s = slow / n;
  r.mean_drain_s = drain / n;
  return r;
}

}  // namespace orrery::sim
