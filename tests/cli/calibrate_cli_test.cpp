// `orrery calibrate` end to end on inputs that need no executor: the PyTorch profiler traces in
// tests/inputs/traces/kineto/ and a lowered graph (which it must refuse).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orrery/pb/calibration.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

class CalibrateCli : public ::testing::Test {
 protected:
  CalibrateCli()
      : dir_(fs::temp_directory_path() / ("orrery_calibrate_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~CalibrateCli() override { fs::remove_all(dir_); }
  const fs::path dir_;
  const std::string cpu_trace_ =
      std::string(ORRERY_TEST_INPUTS) + "/traces/kineto/cpu_gloo_rank0.json";
};

TEST_F(CalibrateCli, FitsAProfilerTraceDeterministically) {
  const fs::path out = dir_ / "cpu.yaml";
  // The CPU trace names no device: say which (a database device, so the peaks are fixed).
  const std::string cmd = "calibrate --traces " + cpu_trace_ +
                          " --device x86-64-AVX512-core --min-samples 2 --out " + out.string();
  const auto r = run_command(orrery(cmd));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pb::CalibrationProfile p;
  read_spec_file(out, &p);
  EXPECT_EQ(p.name(), "cpu");
  ASSERT_EQ(p.sources_size(), 1);
  EXPECT_EQ(p.sources(0), cpu_trace_);
  // GEMMs: linear, mm, matmul. Elementwise: softmax and add. The others have one sample each.
  ASSERT_EQ(p.compute_size(), 2);
  EXPECT_EQ(p.compute(0).op_class(), pb::OP_CLASS_GEMM);
  EXPECT_EQ(p.compute(0).device(), "x86-64-AVX512-core");
  EXPECT_EQ(p.compute(0).fit().samples(), 3);
  EXPECT_EQ(p.compute(1).op_class(), pb::OP_CLASS_ELEMENTWISE);
  // Two all_reduce sizes (1 and 4 MiB): two samples cannot also give a residual, so latency is
  // held at 0 and the bandwidth fitted; the single all_gather stays at the default.
  ASSERT_EQ(p.comm_size(), 1);
  EXPECT_EQ(p.comm(0).scope(), "intra_node");
  EXPECT_EQ(p.comm(0).collective(), pb::COLLECTIVE_KIND_ALL_REDUCE);
  EXPECT_EQ(p.comm(0).latency_s(), 0);
  EXPECT_EQ(std::vector<std::string>(p.comm(0).fit().fitted_params().begin(),
                                     p.comm(0).fit().fitted_params().end()),
            std::vector<std::string>{"bandwidth_bytes_per_s"});
  EXPECT_NE(r.out.find("held (the samples cannot determine them)"), std::string::npos) << r.out;
  const size_t gather = r.out.find("intra_node all_gather ");
  ASSERT_NE(gather, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1 sample(s), 2 needed: the default stays", gather),
            r.out.find('\n', gather) - 40)
      << r.out;

  const std::string first = testing::read_file(out);
  const auto again = run_command(orrery(cmd + " --force --json"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(testing::read_file(out), first);
  const auto j = nlohmann::json::parse(again.out);
  EXPECT_EQ(j["out"], out.string());
  EXPECT_EQ(j["profile"]["compute"].size(), 2u);

  // The profile is a valid --calibration for the simulator.
  const auto sim = run_command(
      orrery("simulate --model tiny --cluster dgx-a100 --nodes 1 --tp 2 --global-batch 8 "
             "--seq 64 --calibration " +
             out.string()));
  EXPECT_EQ(sim.exit_code, 0) << sim.err;
}

TEST_F(CalibrateCli, NeverOverwritesWithoutForce) {
  const fs::path out = dir_ / "p.yaml";
  std::ofstream(out) << "name: mine\n";
  const auto r = run_command(orrery("calibrate --traces " + cpu_trace_ +
                                    " --device x86-64-AVX512-core --out " + out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "error: " + out.string() + ": refusing to overwrite an existing file (use --force)\n");
  EXPECT_EQ(testing::read_file(out), "name: mine\n");
}

TEST_F(CalibrateCli, AProfilerTraceNeedsItsDevice) {
  const auto r = run_command(
      orrery("calibrate --traces " + cpu_trace_ + " --out " + (dir_ / "p.yaml").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("error: " + cpu_trace_ +
                       ": device: the trace names no device; pass --device NAME\n"),
            std::string::npos)
      << r.err;
}

TEST_F(CalibrateCli, RefusesALoweredGraph) {
  const fs::path graph = dir_ / "graph.json";
  const auto g = run_command(
      orrery("simulate --model tiny --cluster dgx-a100 --nodes 1 --tp 2 --global-batch 8 "
             "--seq 64 --graph " +
             graph.string()));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const auto r = run_command(
      orrery("calibrate --traces " + graph.string() + " --out " + (dir_ / "p.yaml").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.err.find(
          "error: " + graph.string() +
          ": ranks[].nodes[].duration_s: no node has a measured duration: this is a lowered graph"),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "p.yaml"));
}

}  // namespace
}  // namespace orrery
