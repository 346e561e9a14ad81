// A plan that names its framework (`framework: NAME@VERSION`, or --framework): the profile fills
// the fields neither the plan nor a flag states, the output says which, and an unknown release is
// refused naming the file, its line, the field and the known values.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

// llama3-8b with ZeRO-1 over two DGX H100 nodes: the data-parallel overlaps change its step.
const char* kPlan =
    "model: llama3-8b\ncluster: dgx-h100\nnodes: 2\n"
    "job: {global_batch_size: 64, seq_len: 4096, precision: bf16}\n"
    "parallel: {tp: 2, pp: 1, dp: 8, sequence_parallel: true}\n"
    "sharding: zero1\nmicro_batch_size: 1\n";

struct PlanFile {
  explicit PlanFile(const std::string& extra)
      : path(fs::temp_directory_path() /
             ("orrery_framework_" + std::to_string(::getpid()) + "_" +
              std::to_string(std::hash<std::string>{}(extra)) + ".yaml")) {
    std::ofstream(path) << kPlan << extra;
  }
  ~PlanFile() { fs::remove(path); }
  fs::path path;
};

nlohmann::json simulate(const std::string& extra, const std::string& flags = "") {
  const PlanFile plan(extra);
  const auto r = run_command(orrery("simulate --json --plan " + plan.path.string() + " " + flags));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

TEST(FrameworkCli, TheProfileFillsWhatThePlanLeavesAndSaysSo) {
  // nemo@24.09: both overlaps on and fp32 reduction; the plan states overlap_param_gather false.
  const auto named = simulate("framework: nemo@24.09\noverlap_param_gather: false\n");
  const auto spelled =
      simulate("overlap_grad_reduce: true\noverlap_param_gather: false\ngrad_reduce_dtype: fp32\n");
  const auto bare = simulate("overlap_param_gather: false\n");
  ASSERT_FALSE(named.is_null());
  EXPECT_EQ(named["step_time_s"], spelled["step_time_s"]);
  EXPECT_NE(named["step_time_s"], bare["step_time_s"]);  // the overlap the profile filled counts
  const auto& f = named["framework"];
  EXPECT_EQ(f["name"], "nemo@24.09");
  std::vector<std::string> filled;
  for (const auto& v : f["from_profile"]) {
    filled.push_back(v["field"].get<std::string>());
    EXPECT_NE(v["source"].get<std::string>().find("NeMo"), std::string::npos);
  }
  EXPECT_EQ(filled, (std::vector<std::string>{"overlap_grad_reduce", "grad_reduce_dtype"}));
  ASSERT_EQ(f["stated_by_plan"].size(), 1U);
  EXPECT_EQ(f["stated_by_plan"][0]["field"], "overlap_param_gather");
  EXPECT_EQ(f["stated_by_plan"][0]["value"], "true");  // the profile's, not used
  // A plan that names no framework says so, and a flag states a field as the file does.
  EXPECT_EQ(bare["framework"]["name"], "");
  const auto flagged = simulate("", "--framework nemo@24.09 --overlap-grad-reduce");
  EXPECT_EQ(flagged["framework"]["stated_by_plan"][0]["field"], "overlap_grad_reduce");
}

TEST(FrameworkCli, TheTextReportListsTheProfilesValues) {
  const PlanFile plan("framework: megatron-core@0.6\n");
  const auto r = run_command(orrery("simulate --plan " + plan.path.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("framework megatron-core@0.6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("from the profile  tp_comm_overlap: false"), std::string::npos) << r.out;
}

TEST(FrameworkCli, AnUnknownReleaseIsRefusedWithTheFileLineAndKnownValues) {
  const PlanFile plan("framework: megatron-core@0.9\n");
  const auto r = run_command(orrery("simulate --plan " + plan.path.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(plan.path.string() + ":8: framework: got 'megatron-core@0.9', a version "
                                            "no megatron-core profile covers; known: "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("nemo@24.09"), std::string::npos) << r.err;
  const auto flag =
      run_command(orrery("simulate --plan " + plan.path.string() + " --framework deepspeed@0.3"));
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("--framework: got 'deepspeed@0.3', a framework no profile describes"),
            std::string::npos)
      << flag.err;
}

}  // namespace
}  // namespace orrery
