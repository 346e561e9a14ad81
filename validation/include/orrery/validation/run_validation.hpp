// `orrery validate --runs`: simulate every case of a published-runs file (the format of
// shared/validation/public_runs.json) and compare with its measured step time.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "orrery/pb/plan.pb.h"
#include "orrery/plan/framework_profile.hpp"
#include "orrery/sim/engine.hpp"

namespace orrery::validation {

struct RunCase {
  std::string id;
  std::string model;    // what was simulated (preset name or "<key> (from the file)")
  std::string cluster;  // cluster preset and node count
  std::string plan;     // one-line plan summary
  double measured_s = 0;
  double predicted_s = 0;
  double error = 0;  // (predicted - measured) / measured
  // The memory model's peak and its device's capacity on the rank nearest its capacity.
  double peak_memory_bytes = 0;
  double memory_capacity_bytes = 0;
  // The framework profile the case's `framework` names and the fields it filled (its `framework`
  // empty when the text names no profile's release).
  plan::AppliedProfile profile;
  std::string skipped;  // non-empty: why the case was not simulated
};

struct RunValidation {
  std::vector<RunCase> cases;
  double median_abs_error = 0;
  double p90_abs_error = 0;
  int simulated = 0;
  int skipped = 0;        // cases not simulated, each with its reason
  int out_of_memory = 0;  // simulated cases whose peak exceeds their device's memory
};

// Throws InputError naming the file for a file that is not a published-runs file (not JSON, no
// `cases` list); a case orrery cannot read or map (a field outside its vocabulary, unknown GPU,
// missing step time, a plan the rules reject) is kept as skipped with the file, field and reason.
// `framework_profiles` false reads every case without its framework's profile (plan/frameworks),
// as before profiles existed: `validate --runs F --no-framework-profiles`, to measure what they
// change.
RunValidation validate_runs(const std::filesystem::path& file, sim::EngineKind engine,
                            const pb::CalibrationProfile* calibration = nullptr,
                            bool framework_profiles = true);

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
  std::string model_label;    // preset name or "<key> (from the file)"
  std::string cluster_label;  // "dgx-a100 x4"
  pb::ModelSpec model;
  pb::ClusterSpec cluster;
  pb::Plan
      plan;  // job (batch, sequence, precision), degrees, sharding, recompute, attention kernel
  double measured_s = 0;
  // As the case writes them (empty where it does not): what --holdout-by groups cases by.
  std::string framework;   // `framework`
  std::string gpu;         // `hardware.gpu`
  std::string source_url;  // `source.url`
  // "NAME@VERSION" of the profile `framework` names ("" when none) and what it filled.
  std::string profile;
  plan::AppliedProfile profile_fields;
  // What the reader assumed where the case is silent, as the plan column shows it after the
  // plan's summary (" (assumed: no recomputation; `recompute` not stated)"); "" when nothing.
  std::string assumed;
  std::string skipped;
};

// Throws InputError for a file that is not a published-runs file; unreadable cases are skipped
// with the reason (as validate_runs does).
std::vector<PublishedRun> published_runs(const std::filesystem::path& file,
                                         bool framework_profiles = true);

// One published run simulated and compared with its measurement, as validate_runs does for each
// case (`calibration` may be null: the default cost models). A run the plan rules reject comes
// back skipped with the reason.
RunCase simulate_run(const PublishedRun& run, sim::EngineKind engine,
                     const pb::CalibrationProfile* calibration);

}  // namespace orrery::validation
