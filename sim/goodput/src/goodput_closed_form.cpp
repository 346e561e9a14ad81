#include <algorithm>
#include <cmath>

#include "orrery/sim/goodput.hpp"

namespace orrery::sim {
namespace {

double detection_s(const RunModel& run, const ComponentFailures& c) {
  return c.cost == FailureCost::kHang ? run.failures.hang_detection_s : 0;
}

double cause_restart_s(const RunModel& run, const ComponentFailures& c) {
  const bool lost = c.cost == FailureCost::kNodeLost;
  return detection_s(run, c) + run.checkpoint.restart_s(lost, run.checkpoint.spare_nodes > 0);
}

// Expected fraction of wall time lost to replica restarts (failures the survivors ride out).
double replica_loss_fraction(const RunModel& run) {
  double lost = 0;
  for (const auto& c : run.failures.components) {
    if (!restarts_job(run, c)) {
      lost +=
          c.rate_per_s * replica_restart_cost_s(run, c, run.step_s / 2, replica_downtime_s(run, c));
    }
  }
  return lost;
}

}  // namespace

bool restarts_job(const RunModel& run, const ComponentFailures& c) {
  return !(run.restart_replicas && run.replicas.possible()) || c.job_wide;
}

double job_failure_rate_per_s(const RunModel& run) {
  if (!(run.restart_replicas && run.replicas.possible())) return run.failures.total_rate_per_s;
  double rate = 0;
  for (const auto& c : run.failures.components) {
    if (restarts_job(run, c)) rate += c.rate_per_s;
  }
  return rate;
}

double replica_downtime_s(const RunModel& run, const ComponentFailures& c) {
  const CheckpointModel& ck = run.checkpoint;
  const bool lost = c.cost == FailureCost::kNodeLost;
  const bool spare = ck.spare_nodes > 0;
  return replica_downtime_after_s(run, lost, ck.restart_s(lost, spare));
}

double replica_downtime_after_s(const RunModel& run, bool node_lost, double restart_s) {
  const CheckpointModel& ck = run.checkpoint;
  return restart_s - (node_lost ? ck.load_s : ck.load_local_s) + run.replicas.recovery_s;
}

double replica_restart_cost_s(const RunModel& run, const ComponentFailures& c, double in_flight_s,
                              double downtime_s) {
  const ReplicaRestarts& r = run.replicas;
  const double out = std::min(r.replicas_per_node, static_cast<double>(r.replicas)) /
                     static_cast<double>(r.replicas);
  return detection_s(run, c) + r.regroup_s + in_flight_s + out * downtime_s;
}

double degradation_slow_s(const RunModel& run, const Degradation& d) {
  if (d.detect_steps > 0) {
    return static_cast<double>(d.detect_steps) * (d.step_ratio - 1) * run.step_s;
  }
  return d.duration_s * (1 - 1 / d.step_ratio);
}

double degradation_drain_s(const RunModel& run, const Degradation& d, double restart_s) {
  return d.detect_steps > 0 ? run.checkpoint.blocking_s + restart_s : 0;
}

double degradation_loss_fraction(const RunModel& run) {
  const double restart = run.checkpoint.restart_s(true, run.checkpoint.spare_nodes > 0);
  double lost = 0;
  for (const auto& d : run.degradations) {
    lost += d.rate_per_s * (degradation_slow_s(run, d) + degradation_drain_s(run, d, restart));
  }
  return lost;
}

double mean_restart_s(const RunModel& run) {
  double weighted = 0;
  for (const auto& c : run.failures.components) {
    if (restarts_job(run, c)) weighted += c.rate_per_s * cause_restart_s(run, c);
  }
  const double rate = job_failure_rate_per_s(run);
  return rate > 0 ? weighted / rate : 0;
}

double closed_form_goodput(const RunModel& run, double interval_s) {
  const double lambda = job_failure_rate_per_s(run);
  const double c = run.checkpoint.blocking_s;
  // Replica restarts and degradations cost the same share of every interval, whatever its length.
  const double riding =
      std::max(0.0, 1 - (replica_loss_fraction(run) + degradation_loss_fraction(run)));
  if (lambda <= 0) return riding * interval_s / (interval_s + c);
  const double m = 1 / lambda;
  // A failure while an asynchronous save persists (background_s after its snapshot) rolls back
  // one more interval; over the interval that averages to background_s more lost per failure.
  const double background = std::min(run.checkpoint.background_s, interval_s + c);
  const double r = mean_restart_s(run) + background;
  // Daly (2006): E[wall time of one interval] = M e^(R/M) (e^((tau+C)/M) - 1).
  const double wall = m * std::exp(r / m) * std::expm1((interval_s + c) / m);
  return riding * interval_s / wall;
}

CheckpointInterval interval_of(const RunModel& run, int64_t steps) {
  const double interval = static_cast<double>(steps) * run.step_s;
  return {steps, interval, closed_form_goodput(run, interval)};
}

CheckpointInterval optimal_interval(const RunModel& run) {
  const double c = run.checkpoint.blocking_s;
  const double min_interval = std::max(run.step_s, run.checkpoint.background_s - c);
  const auto min_steps = static_cast<int64_t>(std::ceil(min_interval / run.step_s - 1e-9));
  // Goodput is unimodal in the interval: golden-section search over log(interval), then the
  // whole step counts on either side of the optimum.
  const double rate = job_failure_rate_per_s(run);
  const double hi_s = rate > 0 ? std::max(min_interval, 100 / rate) : min_interval;
  double lo = std::log(min_interval), hi = std::log(std::max(hi_s, min_interval));
  const double g = (std::sqrt(5.0) - 1) / 2;
  auto f = [&](double x) { return closed_form_goodput(run, std::exp(x)); };
  for (int i = 0; i < 200 && hi - lo > 1e-9; ++i) {
    const double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
    if (f(a) < f(b)) {
      lo = a;
    } else {
      hi = b;
    }
  }
  const auto below = std::max(min_steps, static_cast<int64_t>(std::exp(lo) / run.step_s));
  CheckpointInterval best = interval_of(run, below);
  const CheckpointInterval above = interval_of(run, below + 1);
  return above.goodput > best.goodput ? above : best;
}

double young_interval_s(double checkpoint_s, double mtbf_s) {
  return std::sqrt(2 * checkpoint_s * mtbf_s);
}

double daly_interval_s(double checkpoint_s, double mtbf_s) {
  if (checkpoint_s >= 2 * mtbf_s) return mtbf_s;
  const double x = checkpoint_s / (2 * mtbf_s);
  return young_interval_s(checkpoint_s, mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - checkpoint_s;
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(pos);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (pos - static_cast<double>(i)) * (sorted[i + 1] - sorted[i]);
}

}  // namespace orrery::sim
