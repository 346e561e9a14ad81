// A rank that dies or hangs fails the whole job with a message naming it, within the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "executor_test_util.hpp"
#include "orrery/base/error.hpp"

namespace orrery::executor {
namespace {

std::string failure_of(const char* fault, double timeout_s) {
  ::setenv("ORRERY_FAULT_INJECT", fault, 1);
  std::string message;
  try {
    test::launch(2, {"--tp", "2", "--steps", "3", "--timeout", std::to_string(timeout_s)},
                 timeout_s);
  } catch (const base::EnvironmentError& e) {
    message = e.what();
  }
  ::unsetenv("ORRERY_FAULT_INJECT");
  return message;
}

TEST(Launcher, RankThatDiesFailsTheJob) {
  const std::string m = failure_of("1:2:exit", 30);
  EXPECT_NE(m.find("rank 1 of 2 exited with status 17"), std::string::npos) << m;
}

TEST(Launcher, RankThatHangsFailsTheJobWithinTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const std::string m = failure_of("1:2:hang", 5);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(m.empty());
  // The peer's collective times out after 5 s; the message points at the silent rank.
  EXPECT_NE(m.find("rank 0 of 2 exited with status 1"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 is still running but has printed nothing"), std::string::npos) << m;
  EXPECT_LT(waited, 30.0);
}

TEST(Launcher, AnOpsErrorIsTheRanksOwnNotItsPeers) {
  // Rank 1 fails in libtorch at step 2 (a c10::Error, as an op refusing its inputs raises): its
  // message says so and does not blame a peer or a timeout.
  ::testing::internal::CaptureStderr();
  const std::string m = failure_of("1:2:error", 30);
  const std::string err = ::testing::internal::GetCapturedStderr();
  // The job fails; which rank the launcher blames is whichever closed its output first (rank 0
  // may, seeing its peer's connection close).
  EXPECT_NE(m.find("stopped the job"), std::string::npos) << m;
  EXPECT_NE(err.find("rank 1: step 2 failed in libtorch: fault injected: an op failed"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("rank 1: step 2 failed (a peer died"), std::string::npos) << err;
}

TEST(Launcher, MissingProgramIsReported) {
  LaunchOptions o;
  o.argv = {"/nonexistent/orrery-rank"};
  o.world_size = 2;
  o.timeout_s = 10;
  try {
    launch_local(o);
    FAIL() << "no error";
  } catch (const base::EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 127"), std::string::npos) << e.what();
  }
}

TEST(Launcher, SingleRankJobRuns) {
  const std::string out = test::launch(1, {"--steps", "1"});
  EXPECT_NE(out.find("step 1 loss"), std::string::npos) << out;
}

}  // namespace
}  // namespace orrery::executor
