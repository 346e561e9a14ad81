// Where a rank learns its place: torchrun's variables, OpenMPI's (mpirun), both agreeing, and the
// inconsistent mixes that must fail with the variables named. Each test sets only what it needs;
// a fixture clears every variable the reader looks at before and after.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "executor_test_util.hpp"
#include "orrery/base/error.hpp"
#include "orrery/executor/launcher.hpp"
#include "orrery/executor/rank_env.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

class RankEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
          "TORCHELASTIC_USE_AGENT_STORE"}) {
      ::unsetenv(v);
    }
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }
  // The message of the InputError the reader throws ("" when it does not throw).
  static std::string error() {
    try {
      rank_env_from_environment();
    } catch (const base::InputError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(RankEnvTest, NoLauncherVariablesMeansNoRank) {
  EXPECT_FALSE(rank_env_from_environment().has_value());
}

TEST_F(RankEnvTest, TorchrunStyle) {
  set("RANK", "3");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "1");
  set("MASTER_ADDR", "10.0.0.5");
  set("MASTER_PORT", "1234");
  const auto env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.5");
  EXPECT_EQ(env->master_port, 1234);
  EXPECT_EQ(env->source, RankEnv::Source::kTorchrun);
}

TEST_F(RankEnvTest, OpenMpiOnOneHostDefaultsToLoopbackStore) {
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  const auto env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 2);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->source, RankEnv::Source::kOpenMpi);
}

TEST_F(RankEnvTest, OpenMpiAcrossHostsNeedsMasterAddr) {
  set("OMPI_COMM_WORLD_RANK", "5");
  set("OMPI_COMM_WORLD_SIZE", "8");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  EXPECT_NE(error().find(
                "environment MASTER_ADDR: mpirun placed 8 ranks on several hosts (4 on this one)"),
            std::string::npos)
      << error();
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "29600");
  const auto env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_EQ(env->master_port, 29600);
  EXPECT_EQ(env->local_rank, 1);
}

TEST_F(RankEnvTest, BothLaunchersMustAgree) {
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  ASSERT_TRUE(rank_env_from_environment().has_value());
  set("RANK", "0");
  EXPECT_NE(error().find(
                "environment RANK/OMPI_COMM_WORLD_RANK: RANK is 0 but OMPI_COMM_WORLD_RANK is 1"),
            std::string::npos)
      << error();
  set("RANK", "1");
  set("WORLD_SIZE", "4");
  EXPECT_NE(error().find("WORLD_SIZE is 4 but OMPI_COMM_WORLD_SIZE is 2"), std::string::npos)
      << error();
  set("WORLD_SIZE", "2");
  set("LOCAL_RANK", "0");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  EXPECT_NE(error().find("LOCAL_RANK is 0 but OMPI_COMM_WORLD_LOCAL_RANK is 1"), std::string::npos)
      << error();
}

TEST_F(RankEnvTest, HalfAPairIsAnError) {
  set("RANK", "0");
  EXPECT_NE(error().find("environment RANK/WORLD_SIZE: RANK is set but WORLD_SIZE is not"),
            std::string::npos)
      << error();
  clear();
  set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_NE(error().find("OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not"),
            std::string::npos)
      << error();
}

TEST_F(RankEnvTest, MalformedValuesNameTheVariable) {
  set("OMPI_COMM_WORLD_RANK", "2");
  set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_NE(
      error().find("environment OMPI_COMM_WORLD_RANK: got '2', expected an integer in [0, 1]"),
      std::string::npos)
      << error();
  clear();
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  set("MASTER_PORT", "http");
  EXPECT_NE(error().find("environment MASTER_PORT: got 'http'"), std::string::npos) << error();
}

// A real `mpirun -np 2` of the rank program: the ranks take their place from OMPI_COMM_WORLD_*,
// find the store on the default loopback address (at a free MASTER_PORT), and train exactly what
// the local launcher's ranks train. OpenMPI is kept on loopback and allowed to run as root (CI).
TEST(Mpirun, RanksJoinAndTrainAsUnderTheLocalLauncher) {
  const std::string mpirun = ORRERY_MPIRUN;
  if (mpirun.empty())
    GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs openmpi-bin)";
  const std::string args =
      "--model tiny --dp 2 --global-batch 4 --seq 32 --steps 2 --seed 11 --save-params --out ";
  const std::string launched = test::fresh_dir("mpirun-launched"),
                    joined = test::fresh_dir("mpirun-joined");
  test::launch(2, {"--model", "tiny", "--dp", "2", "--global-batch", "4", "--seq", "32", "--steps",
                   "2", "--seed", "11", "--save-params", "--out", launched});
  const std::string command = test::mpirun_two_ranks(mpirun, 180) +
                              "-x MASTER_PORT=" + std::to_string(pick_free_port("127.0.0.1")) +
                              " " + ORRERY_EXECUTOR_RANK_BIN + " " + args + joined;
  const test::Ran ran = test::run_shell(command);
  const std::string& out = ran.out;
  ASSERT_EQ(ran.status, 0) << out;
  EXPECT_NE(out.find("step 2 loss"), std::string::npos) << out;
  // The same two ranks on the same kernels: bit-identical.
  test::expect_matches(test::read_outcome(launched, 2), test::read_outcome(joined, 2), 0, 0);
  std::filesystem::remove_all(launched);
  std::filesystem::remove_all(joined);
}

}  // namespace
}  // namespace orrery::executor
