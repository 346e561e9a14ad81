// `orrery validate --runs F --holdout-by framework|gpu|source`: leave-one-family-out validation.
//
// The default cost models carry no per-case constant, but their kernel efficiencies were chosen
// with the public runs in view. To measure what that tuning is worth on runs it never saw, the
// holdout fits the part of the defaults that data decides — one factor on the GEMM and attention
// kernels' achieved fraction of peak, for every device — on all families but one, then predicts
// the family left out with it. Each family's error is therefore a prediction of runs the fit
// never saw; the summary pools those predictions. The in-sample fit (all families) is reported
// beside it, and so are the shipped defaults, so the gap between the three is visible.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "orrery/pb/plan.pb.h"
#include "orrery/sim/engine.hpp"
#include "orrery/validation/run_validation.hpp"

namespace orrery::validation {

enum class HoldoutKey { kFramework, kGpu, kSource };

// "framework", "gpu" or "source"; InputError naming `flag` otherwise.
HoldoutKey parse_holdout_key(const std::string& text, const std::string& flag);
const char* to_string(HoldoutKey key);

// The family a run belongs to under `key`: the framework's name without its version
// ("Megatron-LM @6985e58" -> "megatron-lm"), the GPU's generation ("H100-SXM 80GB" -> "h100"),
// or the source's host and first two path parts ("arxiv.org/abs/2104.04473"); "(unstated)" when
// the run does not say.
std::string family_of(const PublishedRun& run, HoldoutKey key);

// The kernel-efficiency factor's search range: below 0.5 no published kernel runs; above 1.2 the
// A100's GEMM default (0.80 of peak) would pass 0.96, past what cuBLAS reaches.
inline constexpr double kMinKernelScale = 0.5;
inline constexpr double kMaxKernelScale = 1.2;

// What the factor means: a profile with the default GEMM and attention curves of every device of
// `cluster`, their max_efficiency times `scale` (every other curve stays the default); with a
// named attention kernel (flash_2, flash_3), also that kernel's curves for the attention core,
// forward and backward, times `scale`.
pb::CalibrationProfile kernel_scale_profile(
    const pb::ClusterSpec& cluster, double scale,
    pb::AttentionKernel kernel = pb::ATTENTION_KERNEL_UNSPECIFIED);

struct HoldoutFamily {
  std::string family;
  int fit_cases = 0;             // simulated cases of the other families the factor was fitted on
  double kernel_scale = 1;       // the factor fitted without this family
  std::vector<RunCase> cases;    // this family's cases predicted with it (skipped ones included)
  std::vector<RunCase> shipped;  // the same cases with the shipped defaults
  double median_abs_error = 0, p90_abs_error = 0;  // held out
  double shipped_median_abs_error = 0, shipped_p90_abs_error = 0;
};

struct RunHoldout {
  HoldoutKey key = HoldoutKey::kFramework;
  std::vector<HoldoutFamily> families;  // in order of first appearance in the file
  // Cases that could not be read (no family can be trusted), each with its reason; never fitted.
  std::vector<RunCase> unread;
  int simulated = 0, skipped = 0;  // skipped counts the unread cases too
  // Pooled over every family's held-out predictions: the figure to quote.
  double median_abs_error = 0, p90_abs_error = 0;
  // The shipped defaults on the same cases, and the factor fitted on all of them (in-sample).
  double shipped_median_abs_error = 0, shipped_p90_abs_error = 0;
  double in_sample_scale = 1;
  double in_sample_median_abs_error = 0, in_sample_p90_abs_error = 0;
};

// Called before each fit: the family being left out ("" for the in-sample fit), and how many
// fits of how many are done.
using HoldoutProgress = std::function<void(const std::string& family, int done, int total)>;

// InputError for a file that is not a published-runs file, or with fewer than two families
// (nothing to hold out against).
// `framework_profiles`: as validate_runs.
RunHoldout holdout_runs(const std::filesystem::path& file, sim::EngineKind engine, HoldoutKey key,
                        const HoldoutProgress& progress = {}, bool framework_profiles = true);

}  // namespace orrery::validation
