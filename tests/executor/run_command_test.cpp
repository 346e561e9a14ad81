// `orrery run` end to end (through tests/executor/run_cli_main.cpp, the run command alone): it
// launches real local ranks, prints every step's loss, writes the step files, and rejects what
// the executor cannot do yet with exit status 2.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "executor_test_util.hpp"
#include "orrery/executor/launcher.hpp"
#include "orrery/executor/results.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

using test::Ran;

Ran run_cli(const std::string& args) { return test::run_cli(ORRERY_RUN_CLI_BIN, args); }

TEST(RunCommand, LaunchesLocalRanksAndWritesEveryStep) {
  const std::string dir = test::fresh_dir("cli-tp2");
  const Ran r = run_cli(
      "--model tiny --cluster local --tp 2 --dp 1 --global-batch 2 --seq 32 --steps 2 --seed 3 "
      "--out " +
      dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 local rank(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1 loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
  const StepResult last = read_step_result(step_file(dir, 2));
  EXPECT_EQ(last.step, 2);
  EXPECT_GT(last.loss, 0);
  std::filesystem::remove_all(dir);
}

// A local run needs no batch arithmetic: unstated, the global batch is one micro-batch per
// pipeline stage and replica, and the header prints it with what was not stated.
TEST(RunCommand, AnUnstatedGlobalBatchFillsThePipelineAndIsPrinted) {
  const Ran r = run_cli("--model tiny --cluster local --pp 2 --dp 1 --micro-batch 2 --steps 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("tp1 pp2 dp1, micro-batch 2, global batch 4 (not stated: dp x "
                       "micro-batch x pp), seq 64, fp32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 1 loss"), std::string::npos) << r.out;
  const Ran stated = run_cli("--model tiny --cluster local --dp 2 --global-batch 4 --steps 1");
  ASSERT_EQ(stated.status, 0) << stated.out;
  EXPECT_NE(stated.out.find("global batch 4, seq"), std::string::npos) << stated.out;
}

// A CPU plan whose ranks would exhaust the host is refused before any rank starts, naming the
// estimate, the limit and the flag that raises it.
TEST(RunCommand, APlanAboveTheHostMemoryIsRefusedBeforeAnyRankStarts) {
  const Ran r = run_cli("--model tiny --cluster local --dp 2 --steps 1 --host-memory '1 MiB'");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("error: plan: its local ranks need about"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more than the limit of 1 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--host-memory SIZE raises the limit"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1 loss"), std::string::npos) << r.out;
  const Ran bad = run_cli("--model tiny --cluster local --steps 1 --host-memory lots");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--host-memory: got 'lots'"), std::string::npos) << bad.out;
}

// SIGINT or SIGTERM to the launcher (Ctrl-C, or a scheduler's kill) stops every rank, says why,
// and exits with 128 + the signal, as a shell expects; no rank is left behind.
TEST(RunCommand, SaysWhyItStoppedOnSigintAndSigterm) {
  for (const auto& [sig, code, name] :
       {std::tuple{"INT", 130, "SIGINT (Ctrl-C)"}, std::tuple{"TERM", 143, "SIGTERM"}}) {
    SCOPED_TRACE(sig);
    // The signal goes once the job trains (its first step printed), not after a fixed delay: on
    // a loaded machine the launcher may not have started by then.
    const std::string log = test::fresh_dir("signal") + "/out.txt";
    const Ran r = test::run_shell(
        std::string(ORRERY_RUN_CLI_BIN) +
        " run --model tiny --cluster local --dp 2 --global-batch 4 --seq 32 --steps 1000000 "
        "--timeout 30 > " +
        log + " 2>&1 & pid=$!; for i in $(seq 1200); do grep -q 'step 1 loss' " + log +
        " && break; sleep 0.1; done; kill -" + sig + " $pid; wait $pid; echo \"status $?\"; cat " +
        log);
    EXPECT_NE(r.out.find("status " + std::to_string(code)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string("orrery run: interrupted by ") + name +
                         ": stopped the job's 2 rank(s)"),
              std::string::npos)
        << r.out;
    std::filesystem::remove_all(std::filesystem::path(log).parent_path());
  }
  // Nothing of the job still runs: every rank was reaped before the launcher exited.
  const Ran left = test::run_shell("pgrep -f 'steps 100000[0]' || true");
  EXPECT_EQ(left.out, "") << left.out;
}

TEST(RunCommand, ContextParallelismTrains) {
  const Ran r =
      run_cli("--model tiny --cluster local --cp 2 --dp 1 --global-batch 2 --seq 32 --steps 1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("dp1 cp2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1 loss"), std::string::npos) << r.out;
}

TEST(RunCommand, PipelineWithGpipe) {
  const Ran r = run_cli(
      "--model tiny --cluster local --pp 2 --dp 1 --global-batch 4 --seq 16 --schedule gpipe "
      "--steps 2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
}

TEST(RunCommand, AGpuClusterNeedsAGpu) {
  // One rank of a job on a GPU cluster (torchrun-style): it trains on cuda:LOCAL_RANK or fails
  // saying why, and never quietly trains on the CPU instead.
  const Ran r = test::run_shell(
      "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29671 timeout 120 " +
      std::string(ORRERY_RUN_CLI_BIN) +
      " run --model tiny --cluster dgx-h100 --dp 1 --global-batch 2 --seq 16 --steps 1");
  if (r.status == 0) {  // a CUDA build on a machine with a GPU
    EXPECT_NE(r.out.find("step 1 loss"), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("the cluster's devices are GPUs, but "), std::string::npos) << r.out;
}

TEST(RunCommand, TrainsFp16WithStatedLossScaling) {
  // GradScaler's defaults, printed; a stated initial scale is used, and the flag is refused on a
  // precision it does not apply to.
  Ran r =
      run_cli("--model tiny --cluster local --dp 1 --global-batch 2 --steps 1 --precision fp16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("fp16 dynamic loss scaling: initial scale 65536, x2 after 2000 steps "
                       "without inf/nan, x0.5"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 1 loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loss_scale 65536 time"), std::string::npos) << r.out;
  r = run_cli(
      "--model tiny --cluster local --dp 1 --global-batch 2 --steps 1 --precision fp16 "
      "--loss-scale 1e60");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("loss_scale 1e+60 skipped (inf/nan gradients)"), std::string::npos) << r.out;
  r = run_cli(
      "--model tiny --cluster local --dp 1 --global-batch 2 --steps 1 --precision bf16 "
      "--loss-scale 1024");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--loss-scale: loss scaling applies to job.precision fp16 only"),
            std::string::npos)
      << r.out;
}

TEST(RunCommand, TrainsInBf16) {
  Ran r = run_cli(
      "--model tiny --cluster local --dp 2 --global-batch 4 --seq 32 --steps 2 --precision bf16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
  // With tensor parallelism too (its activation collectives in bf16, mixed_precision.hpp).
  r = run_cli(
      "--model tiny --cluster local --tp 2 --dp 1 --global-batch 2 --seq 32 --steps 2 --precision "
      "bf16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
}

// `mpirun -np 2 orrery run ...` (ranks from OMPI_COMM_WORLD_*, the store on the default
// loopback address at a free MASTER_PORT) trains exactly what the local launcher trains, and
// only rank 0 prints the step lines. OpenMPI is kept on loopback and allowed to run as root (CI).
TEST(RunCommand, JoinsFromMpirunsEnvironment) {
  const std::string mpirun = ORRERY_MPIRUN;
  if (mpirun.empty())
    GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs openmpi-bin)";
  const std::string job =
      "--model tiny --cluster local --dp 2 --global-batch 4 --seq 32 --steps 2 --seed 5 "
      "--save-params";
  const std::string launched = test::fresh_dir("cli-launched");
  const Ran ref = run_cli(job + " --force --out " + launched);
  ASSERT_EQ(ref.status, 0) << ref.out;
  const std::string joined = test::fresh_dir("cli-mpirun");
  const std::string command = test::mpirun_two_ranks(mpirun, 180) +
                              "-x MASTER_PORT=" + std::to_string(pick_free_port("127.0.0.1")) +
                              " " + ORRERY_RUN_CLI_BIN + " run " + job + " --force --out " + joined;
  const Ran r = test::run_shell(command);
  ASSERT_EQ(r.status, 0) << r.out;
  // Rank 0's lines once each: the other rank's stdout also reaches mpirun's.
  EXPECT_NE(r.out.find("step 2 loss"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 2 loss"), r.out.rfind("step 2 loss")) << r.out;
  const auto a = test::read_outcome(launched, 2), b = test::read_outcome(joined, 2);
  test::expect_matches(a, b, 0, 0);  // the same two ranks on the same kernels: bit-identical
  std::filesystem::remove_all(launched);
  std::filesystem::remove_all(joined);
}

TEST(RunCommand, MpirunWithHalfOfTorchrunsPairFails) {
  const std::string mpirun = ORRERY_MPIRUN;
  if (mpirun.empty())
    GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs openmpi-bin)";
  const std::string command =
      test::mpirun_two_ranks(mpirun, 60) + "-x RANK=0 " + std::string(ORRERY_RUN_CLI_BIN) +
      " run --model tiny --cluster local --dp 2 --global-batch 4 --seq 32 --steps 1";
  const Ran ran = test::run_shell(command);
  const std::string& out = ran.out;
  EXPECT_NE(ran.status, 0) << out;
  // RANK=0 exported to both ranks: half of torchrun's pair, and rank 1 disagrees with OpenMPI.
  EXPECT_NE(out.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << out;
}

TEST(RunCommand, OtherClustersNeedTorchrunStyleRanks) {
  const Ran r =
      run_cli("--model tiny --cluster dgx-h100 --nodes 2 --tp 2 --dp 1 --global-batch 2 --steps 1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"), std::string::npos)
      << r.out;
}

TEST(RunCommand, AClusterOfOneNodeIsLaunchedHereAndReportsItsMfu) {
  // A cluster file describing one machine (as scripts/gpu/h200-1gpu.yaml does a GPU box) runs its
  // ranks here, as `local` does; with --out the run ends with its throughput against the peak
  // of the cluster's devices.
  const std::string dir = test::fresh_dir("cli-one-node");
  const std::string cluster = dir + ".cluster.yaml";
  std::ofstream(cluster)
      << "name: two-cores\n"
         "node_types:\n"
         "  - {name: box, device: x86-64-AVX512-core, devices_per_node: 2,\n"
         "     intra: {kind: host, device_link: {bandwidth_bytes_per_s: 20 GB/s},\n"
         "             pcie_link: {bandwidth_bytes_per_s: 20 GB/s}}}\n"
         "node_groups:\n"
         "  - {name: box, node_type: box, count: 1}\n"
         "fabric: {kind: none}\n";
  const Ran r = run_cli("--model tiny --cluster " + cluster +
                        " --dp 2 --global-batch 2 --seq 16 --steps 2 --out " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 local rank(s)"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/trace.json")) << r.out;
  // "mean step 21 ms (steps 2..2), 1523 tokens/s, MFU 0.0% of the cluster's fp32 peak"
  EXPECT_NE(r.out.find("(steps 2..2), "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tokens/s, MFU "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("% of the cluster's fp32 peak"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(cluster);
}

}  // namespace
}  // namespace orrery::executor
