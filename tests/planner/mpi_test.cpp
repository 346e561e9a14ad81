// `mpirun -np 2 orrery plan ...` against `orrery plan ...`: the same stdout bytes, exit 0, and
// nothing printed twice. OpenMPI is forced onto loopback (the CI sandbox has no network) and
// allowed to run as root (CI containers run as root).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../cli/run_command.hpp"
#include "test_paths.hpp"

namespace orrery::testing {
namespace {

const std::string kMpirun = ORRERY_MPIRUN;  // "" when CMake found no mpirun
const std::string kOrrery = ORRERY_BIN;

std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + kMpirun +
         " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) +
         " --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo ";
}

void skip_without_mpi() {
  if (kMpirun.empty())
    GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs openmpi-bin)";
  if (!ORRERY_PLANNER_HAS_MPI) {
    GTEST_SKIP() << "the planner was built without MPI (libopenmpi-dev missing when CMake ran)";
  }
}

// Screened + local search on 32 H100s: 3,236 candidates checked and 276 timed, in several batches.
const std::string kPlan =
    " plan --model llama3-70b --cluster dgx-h100 --nodes 4 --global-batch 128 --seq 4096"
    " --max-micro-batch 4 --exhaustive-limit 0 --top 5 --threads 1";

TEST(Mpi, TwoRanksPrintTheSameJsonAsOneProcess) {
  skip_without_mpi();
  const CommandResult single = run_command(kOrrery + kPlan + " --json --quiet");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  ASSERT_NE(single.out.find("\"rank\": 5"), std::string::npos) << single.out;
  const CommandResult spread = run_command(mpirun(2) + kOrrery + kPlan + " --json --quiet");
  ASSERT_EQ(spread.exit_code, 0) << spread.err;
  EXPECT_EQ(spread.out, single.out);
}

TEST(Mpi, ThreeRanksPrintTheTableOnceAndTheSummaryOnce) {
  skip_without_mpi();
  const CommandResult single = run_command(kOrrery + kPlan);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const CommandResult spread = run_command(mpirun(3) + kOrrery + kPlan);
  ASSERT_EQ(spread.exit_code, 0) << spread.err;
  EXPECT_EQ(spread.out, single.out);
  ASSERT_NE(single.out.find("why #1"), std::string::npos) << single.out;
  const auto first = spread.err.find("planned in ");
  ASSERT_NE(first, std::string::npos) << spread.err;
  EXPECT_EQ(spread.err.find("planned in ", first + 1), std::string::npos) << spread.err;
}

TEST(Mpi, OnlyRankZeroWritesThePlanFile) {
  skip_without_mpi();
  const std::string file = ::testing::TempDir() + "orrery_mpi_best_plan.yaml";
  std::remove(file.c_str());
  // Without --force: a second writer would find the file there and fail.
  const CommandResult spread = run_command(mpirun(2) + kOrrery + kPlan + " --quiet --out " + file);
  ASSERT_EQ(spread.exit_code, 0) << spread.err;
  EXPECT_NE(spread.err.find("wrote " + file), std::string::npos) << spread.err;
  std::remove(file.c_str());
}

}  // namespace
}  // namespace orrery::testing
