// `orrery run --plan`: a flag left out never overrides the plan's fields. A bf16 plan trains in
// bf16 without --precision (its losses are the --precision bf16 run's, not the fp32 run's); a
// job given by flags alone trains in fp32, run's own default; the plan's degrees stand, and a
// flag given wins over them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "executor_test_util.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

using test::Ran;

// A plan of the tiny model on this machine in `precision`.
std::string write_plan(const std::string& name, const std::string& precision) {
  const std::string file = test::fresh_dir("run-flags") + "/" + name + ".yaml";
  std::ofstream(file) << "model: tiny\ncluster: local\n"
                      << "job: {global_batch_size: 4, seq_len: 32, precision: " << precision
                      << "}\nparallel: {dp: 1}\nmicro_batch_size: 2\n";
  return file;
}

// The "step N loss L grad_norm G" lines of a run, the rest of its output dropped.
std::string losses(const std::string& args) {
  const Ran r = test::run_cli(ORRERY_RUN_CLI_BIN, args + " --steps 2 --seed 5");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  std::istringstream in(r.out);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.rfind("step ", 0) == 0)
      kept += line.substr(0, line.find(" time ")) + "\n";  // wall time varies
  }
  EXPECT_NE(kept.find("step 2 loss"), std::string::npos) << r.out;
  return kept;
}

TEST(RunFlags, ABf16PlanTrainsInBf16WithoutThePrecisionFlag) {
  const std::string plan = write_plan("bf16", "bf16");
  const std::string from_plan = losses("--plan " + plan);
  EXPECT_EQ(from_plan, losses("--plan " + plan + " --precision bf16"));
  EXPECT_NE(from_plan, losses("--plan " + plan + " --precision fp32"));  // a flag given wins
  std::filesystem::remove_all(std::filesystem::path(plan).parent_path());
}

TEST(RunFlags, AJobGivenByFlagsAloneTrainsInFp32) {
  // A plan file must state job.precision; without one, run's own default applies.
  const std::string job =
      "--model tiny --cluster local --dp 1 --global-batch 4 --seq 32 --micro-batch 2";
  const std::string alone = losses(job);
  EXPECT_EQ(alone, losses(job + " --precision fp32"));
  EXPECT_NE(alone, losses(job + " --precision bf16"));
}

TEST(RunFlags, ThePlansDegreesStandAndAGivenFlagWins) {
  // tp 2 from the plan (without --dp, dp would fill this machine's cores: the plan says 1).
  const std::string plan = test::fresh_dir("run-flags") + "/tp2.yaml";
  std::ofstream(plan)
      << "model: tiny\ncluster: local\njob: {global_batch_size: 4, seq_len: 32, precision: fp32}\n"
         "parallel: {tp: 2, dp: 1}\nmicro_batch_size: 1\n";
  Ran r = test::run_cli(ORRERY_RUN_CLI_BIN, "--plan " + plan + " --steps 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 local rank(s)"), std::string::npos) << r.out;
  r = test::run_cli(ORRERY_RUN_CLI_BIN, "--plan " + plan + " --tp 1 --steps 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 local rank(s)"), std::string::npos) << r.out;
  std::filesystem::remove_all(std::filesystem::path(plan).parent_path());
}

}  // namespace
}  // namespace orrery::executor
