// Failure rates of a plan's components (FailureModel in the cluster spec, published defaults for
// what it leaves out) and the straggler slowdown a synchronous step feels. docs/goodput.md gives
// the sources of every default.
#pragma once

#include <string>
#include <vector>

#include "orrery/base/units.hpp"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/options.pb.h"
#include "orrery/sim/footprint.hpp"

namespace orrery::sim {

// One input of the goodput model as used: its value in SI units and where it came from, so that
// the output lists every default it applied (none is silent).
struct Setting {
  std::string field;  // "failures.gpu_mtbf_s"
  double value = 0;
  base::units::Unit unit = base::units::Unit::kNone;
  std::string source;  // "cluster file", or the default's source
};

// What a failure of this kind costs besides the restart: a lost node needs a replacement (hot
// spare or requeue); a hang first waits for the watchdog.
enum class FailureCost { kNodeLost, kRestartInPlace, kHang };

struct ComponentFailures {
  std::string component;  // "gpu", "hbm", ...
  int64_t count = 0;      // in the plan's footprint
  double mtbf_s = 0;      // of one component
  double rate_per_s = 0;  // count / mtbf_s
  FailureCost cost = FailureCost::kRestartInPlace;
  // Takes out nodes of several data-parallel replicas at once (a fabric switch): the whole job
  // restarts from its checkpoint even when replicas can restart alone.
  bool job_wide = false;
};

struct FailureRates {
  std::vector<ComponentFailures> components;
  double total_rate_per_s = 0;
  double hang_detection_s = 0;
  double straggler_fraction = 0;
  double straggler_slowdown = 1;
  std::vector<Setting> settings;
};

// `where` names the cluster (file or preset) in errors about values the reader cannot check.
FailureRates failure_rates(const pb::ClusterSpec& cluster, const Footprint& footprint,
                           const std::string& where);

// Expected step-time factor (>= 1) when each of `gpus` synchronous members is independently a
// straggler with probability `fraction`: the step runs at the slowest member's pace, so it is
// `slowdown` times longer whenever any member straggles. Given a simulated step ratio instead of
// the GPU's slowdown (the des engine's step with one slow GPU over its step without), the same
// expectation prices what the step really feels (PlanRun::straggler_source).
double straggler_step_factor(double fraction, double slowdown, int64_t gpus);

}  // namespace orrery::sim
