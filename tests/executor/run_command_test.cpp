// `orrery run` end to end (through tests/executor/run_cli_main.cpp, the run command alone): it
// launches real local ranks, prints every step's loss, writes the step files, and rejects what
// the executor cannot do yet with exit status 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>

#include "executor_test_util.hpp"
#include "orrery/executor/results.hpp"

namespace orrery::executor {
namespace {

using test::Ran;

Ran run_cli(const std::string& args) { return test::run_cli(ORRERY_RUN_CLI_BIN, args); }

TEST(RunCommand, LaunchesLocalRanksAndWritesEveryStep) {
  const std::string dir = test::fresh_dir("cli-tp2");
  const Ran r = run_cli("--model tiny --cluster local --tp 2 --dp 1 --global-batch 2 --seq 32 --steps 2 --seed 3 --out " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 local rank(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1 loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
  const StepResult last = read_step_result(step_file(dir, 2));
  EXPECT_EQ(last.step, 2);
  EXPECT_GT(last.loss, 0);
  std::filesystem::remove_all(dir);
}

TEST(RunCommand, RejectsContextParallelismForNow) {
  const Ran r = run_cli("--model tiny --cluster local --cp 2 --dp 1 --global-batch 2 --steps 1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("context parallelism is not implemented in the executor yet"), std::string::npos) << r.out;
}

TEST(RunCommand, PipelineWithGpipe) {
  const Ran r = run_cli("--model tiny --cluster local --pp 2 --dp 1 --global-batch 4 --seq 16 --schedule gpipe --steps 2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
}

TEST(RunCommand, RejectsBf16OnCpu) {
  const Ran r = run_cli("--model tiny --cluster local --dp 1 --global-batch 2 --steps 1 --precision bf16");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("trains in fp32 only"), std::string::npos) << r.out;
}

TEST(RunCommand, OtherClustersNeedTorchrunStyleRanks) {
  const Ran r = run_cli("--model tiny --cluster dgx-h100 --nodes 1 --tp 2 --dp 1 --global-batch 2 --steps 1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace orrery::executor
