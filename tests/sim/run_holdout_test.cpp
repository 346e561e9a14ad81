// Leave-one-family-out validation (validation/run_holdout.hpp): families as the cases write them,
// the kernel factor recovered from runs whose "measurements" were made with a known factor, and
// the shipped predictions equal to validate_runs'.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/validation/run_holdout.hpp"
#include "orrery/validation/run_validation.hpp"
#include "test_paths.hpp"

namespace orrery::validation {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kPublicRuns = fs::path(ORRERY_SOURCE_DIR) / "../shared/validation/public_runs.json";

PublishedRun run(const std::string& framework, const std::string& gpu, const std::string& url) {
  PublishedRun r;
  r.framework = framework;
  r.gpu = gpu;
  r.source_url = url;
  return r;
}

TEST(Holdout, FamiliesAsTheCasesWriteThem) {
  const PublishedRun a =
      run("Megatron-LM @6985e58", "A100-SXM4-80GB", "https://arxiv.org/abs/2104.04473");
  EXPECT_EQ(family_of(a, HoldoutKey::kFramework), "megatron-lm");
  EXPECT_EQ(family_of(a, HoldoutKey::kGpu), "a100");
  EXPECT_EQ(family_of(a, HoldoutKey::kSource), "arxiv.org/abs/2104.04473");
  const PublishedRun b =
      run("NeMo 24.09", "GB200 NVL72", "https://github.com/NVIDIA/some-repo/blob/main/x.md");
  EXPECT_EQ(family_of(b, HoldoutKey::kFramework), "nemo");
  EXPECT_EQ(family_of(b, HoldoutKey::kGpu), "gb200");  // not b200
  EXPECT_EQ(family_of(b, HoldoutKey::kSource), "github.com/NVIDIA/some-repo");
  EXPECT_EQ(family_of(run("", "", ""), HoldoutKey::kSource), "(unstated)");
  EXPECT_THROW(parse_holdout_key("model", "--holdout-by"), base::InputError);
}

// Six small public cases (two GPU generations), each "measured" as the simulator predicts it
// with the kernel factor `truth`: every fit must find `truth` again, and predict the family it
// never saw almost exactly.
const std::set<std::string> kSmallCases = {"SC21-T1-1.7B",        "SC21-T1-3.6B",
                                           "KORT-T5-22B-full",    "KORT-T5-22B-seqsel",
                                           "DGXC-N4-15B-BF16-16", "DGXC-L70B-BF16-64"};

fs::path runs_made_with(double truth, const fs::path& dir, const std::set<std::string>& keep) {
  std::ifstream in(kPublicRuns);
  const json all = json::parse(in);
  json out = {{"cases", json::array()}};
  const fs::path scratch = dir / "one.json";
  for (const auto& c : all["cases"]) {
    if (!keep.count(c["id"].get<std::string>())) continue;
    std::ofstream(scratch) << json{{"cases", {c}}}.dump();
    const PublishedRun r = published_runs(scratch).front();
    const pb::CalibrationProfile p = kernel_scale_profile(r.cluster, truth);
    json made = c;
    made["measured"] = {
        {"iter_time_s", simulate_run(r, sim::EngineKind::kAnalytic, &p).predicted_s}};
    out["cases"].push_back(made);
  }
  const fs::path file = dir / "made.json";
  std::ofstream(file) << out.dump(1);
  return file;
}

TEST(Holdout, RecoversAKnownFactorAndPredictsTheUnseenFamily) {
  const fs::path dir = fs::temp_directory_path() / ("orrery-holdout-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = runs_made_with(0.85, dir, kSmallCases);
  const RunHoldout h = holdout_runs(file, sim::EngineKind::kAnalytic, HoldoutKey::kGpu);
  ASSERT_EQ(h.families.size(), 2u);
  EXPECT_EQ(h.families[0].family, "a100");
  EXPECT_EQ(h.families[0].fit_cases, 2);  // the two H100 cases
  EXPECT_EQ(h.families[1].family, "h100");
  EXPECT_EQ(h.families[1].fit_cases, 4);
  for (const auto& f : h.families) {
    EXPECT_NEAR(f.kernel_scale, 0.85, 2e-3) << f.family;
    EXPECT_LT(f.median_abs_error, 2e-3) << f.family;
    // The shipped defaults (factor 1) predict these made-up runs too fast.
    EXPECT_GT(f.shipped_median_abs_error, 0.03) << f.family;
  }
  EXPECT_NEAR(h.in_sample_scale, 0.85, 2e-3);
  EXPECT_EQ(h.simulated, 6);
  // One GPU generation only: nothing to hold out against.
  const fs::path a100 = runs_made_with(0.85, dir, {"SC21-T1-1.7B", "KORT-T5-22B-full"});
  EXPECT_THROW(holdout_runs(a100, sim::EngineKind::kAnalytic, HoldoutKey::kGpu), base::InputError);
  fs::remove_all(dir);
}

// A run naming its kernel generation (flash_2: PyTorch SDPA's flash backend) is priced at that
// kernel's figures; the factor's profile at 1 must price it the same, and not put the device's
// generic attention curve in its place (a class curve in a profile wins over the kernel's).
TEST(Holdout, TheFactorScalesTheNamedAttentionKernel) {
  const fs::path assembled = fs::path(ORRERY_SOURCE_DIR) / "validation/data/runs.json";
  const PublishedRun* flash2 = nullptr;
  const std::vector<PublishedRun> runs = published_runs(assembled);
  for (const auto& r : runs) {
    if (r.skipped.empty() && r.plan.attention_kernel() == pb::ATTENTION_KERNEL_FLASH_2) {
      flash2 = &r;
      break;
    }
  }
  ASSERT_NE(flash2, nullptr) << "no flash_2 case in " << assembled;
  const double plain = simulate_run(*flash2, sim::EngineKind::kAnalytic, nullptr).predicted_s;
  const pb::CalibrationProfile one =
      kernel_scale_profile(flash2->cluster, 1.0, flash2->plan.attention_kernel());
  EXPECT_NEAR(simulate_run(*flash2, sim::EngineKind::kAnalytic, &one).predicted_s / plain, 1.0,
              1e-9);
  const pb::CalibrationProfile generic = kernel_scale_profile(flash2->cluster, 1.0);
  EXPECT_GT(
      std::fabs(simulate_run(*flash2, sim::EngineKind::kAnalytic, &generic).predicted_s / plain -
                1.0),
      0.01)
      << flash2->id << ": the generic attention curve should price this case differently";
  const pb::CalibrationProfile slower =
      kernel_scale_profile(flash2->cluster, 0.8, flash2->plan.attention_kernel());
  EXPECT_GT(simulate_run(*flash2, sim::EngineKind::kAnalytic, &slower).predicted_s, plain * 1.05);
}

}  // namespace
}  // namespace orrery::validation
