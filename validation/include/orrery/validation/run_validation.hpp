// `orrery validate --runs`: simulate every case of a published-runs file (the format of
// shared/validation/public_runs.json) and compare with its measured step time.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "orrery/pb/plan.pb.h"
#include "orrery/sim/engine.hpp"

namespace orrery::validation {

struct RunCase {
  std::string id;
  std::string model;    // what was simulated (preset name or "<key> (from the file)")
  std::string cluster;  // cluster preset and node count
  std::string plan;     // one-line plan summary
  double measured_s = 0;
  double predicted_s = 0;
  double error = 0;     // (predicted - measured) / measured
  std::string skipped;  // non-empty: why the case was not simulated
};

struct RunValidation {
  std::vector<RunCase> cases;
  double median_abs_error = 0;
  double p90_abs_error = 0;
  int simulated = 0;
};

// Throws InputError naming the file and field for a malformed file; a case orrery cannot map
// (unknown GPU, missing step time) is kept as skipped with the reason.
RunValidation validate_runs(const std::filesystem::path& file, sim::EngineKind engine,
                            const pb::CalibrationProfile* calibration = nullptr);

// Median and 90th percentile of |errors| (nearest rank); zeros for an empty list.
std::pair<double, double> median_p90(std::vector<double> abs_errors);

}  // namespace orrery::validation

namespace orrery::validation {

// One case of a published-runs file as the simulator sees it: the model, the cluster sized to the
// run's nodes and the published plan, mapped exactly as validate_runs maps them (for the planner
// benchmark: plan the same job and compare). `skipped` non-empty: why the case cannot be mapped
// (the other fields are then partial).
struct PublishedRun {
  std::string id;
  std::string model_label;  // preset name or "<key> (from the file)"
  std::string cluster_label;  // "dgx-a100 x4"
  pb::ModelSpec model;
  pb::ClusterSpec cluster;
  pb::Plan plan;  // job (batch, sequence, precision), degrees, sharding, recompute, attention kernel
  double measured_s = 0;
  std::string skipped;
};

// Throws InputError naming the file and field for a malformed file (as validate_runs does).
std::vector<PublishedRun> published_runs(const std::filesystem::path& file);

}  // namespace orrery::validation
