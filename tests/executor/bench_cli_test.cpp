// `orrery bench --quick` end to end on this machine, then `orrery calibrate` on what it wrote, then
// the profile in `simulate` and `plan`: real measurements through the whole calibration path
// (one test, so the bench runs once). Then a run measured by `orrery run --out` through
// `validate --trace` and `calibrate`.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orrery/pb/calibration.pb.h"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/sim_result.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("orrery_bench_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(BenchCli, MeasuresCalibratesAndSimulates) {
  TempDir tmp;
  const fs::path trace_file = tmp.path() / "bench.json";
  const auto bench = run_command(orrery("bench --quick --json --out " + trace_file.string()));
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.err.find("bench: gemm.64x64x64 (1/"), std::string::npos) << bench.err;

  // --json: the figures, each derived from its own time.
  const auto j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j["device"], "local-cpu-core");
  EXPECT_FALSE(j["blas"].get<std::string>().empty());
  // Which kernels ran and who chose them (executor/include/orrery/executor/blas_kernels.hpp):
  // where orrery chose, those kernels ran ("OPENBLAS_CORETYPE=SKYLAKEX (chosen by orrery ...").
  const std::string kernels = j["blas_kernels"], coretype = j["openblas_coretype"];
  EXPECT_EQ(coretype.rfind("OPENBLAS_CORETYPE", 0), 0u) << coretype;
  if (coretype.find("(chosen by orrery") != std::string::npos) {
    const size_t from = coretype.find('=') + 1;
    EXPECT_EQ(lower(kernels), lower(coretype.substr(from, coretype.find(' ') - from))) << coretype;
  }
  const double peak = j["peak_fp32_flops_per_s"].get<double>();
  std::set<std::string> ops;
  for (const auto& op : j["compute"]) {
    ops.insert(op["op"].get<std::string>());
    EXPECT_GT(op["seconds"].get<double>(), 0) << op["name"];
    EXPECT_DOUBLE_EQ(op["flops_per_s"].get<double>(),
                     op["flops"].get<double>() / op["seconds"].get<double>());
    EXPECT_DOUBLE_EQ(op["peak_fraction"].get<double>(), op["flops_per_s"].get<double>() / peak);
    // A one-core GEMM cannot beat the core's derived peak by much (turbo above nominal at most).
    if (op["op"] == "gemm") {
      EXPECT_LT(op["peak_fraction"].get<double>(), 1.5) << op["name"];
    }
  }
  EXPECT_EQ(ops, (std::set<std::string>{"gemm", "attn.core", "attn.scores", "attn.softmax",
                                        "attn.context", "add", "copy", "rmsnorm", "layernorm",
                                        "softmax", "embedding"}));
  // 4 collectives x 3 sizes on 2 ranks; busbw is algbw x nccl-tests' factor.
  ASSERT_EQ(j["collectives"].size(), 12u);
  for (const auto& c : j["collectives"]) {
    const double factor =
        c["collective"] == "all_reduce" ? 1.0 : 0.5;  // 2(n-1)/n, (n-1)/n at n = 2
    EXPECT_NEAR(c["busbw_bytes_per_s"].get<double>(), factor * c["algbw_bytes_per_s"].get<double>(),
                1e-9 * c["algbw_bytes_per_s"].get<double>());
    if (c["collective"] == "reduce_scatter") {
      EXPECT_EQ(c["algorithm"], "alltoall+sum");
    }
  }

  // --out: a measured trace carrying this machine as its cluster.
  pb::ExecGraph trace;
  read_spec_file(trace_file, &trace);
  EXPECT_EQ(trace.device(), "local-cpu-core");
  EXPECT_EQ(trace.world_size(), 2);
  ASSERT_TRUE(trace.has_cluster_spec());
  ASSERT_EQ(trace.ranks_size(), 2);
  const auto& nodes = trace.ranks(0).nodes();
  ASSERT_EQ(static_cast<size_t>(nodes.size()), j["compute"].size() + 12);
  for (const auto& n : nodes) {
    EXPECT_TRUE(n.has_duration_s() && n.duration_s() > 0) << n.name();
    if (n.op() == "gemm") {
      EXPECT_DOUBLE_EQ(n.flops(), 2.0 * n.shape(0) * n.shape(1) * n.shape(2)) << n.name();
    }
    if (n.op() == "copy") {  // the copy class's samples: bytes, no FLOPs
      EXPECT_EQ(n.op_class(), pb::OP_CLASS_COPY) << n.name();
      EXPECT_EQ(n.flops(), 0) << n.name();
      EXPECT_DOUBLE_EQ(n.bytes_read(), 4.0 * n.shape(0)) << n.name();
      EXPECT_DOUBLE_EQ(n.bytes_written(), 4.0 * n.shape(0)) << n.name();
    }
  }
  // Never over a file without --force, and refused before measuring anything.
  const auto again = run_command(orrery("bench --quick --out " + trace_file.string()));
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_EQ(again.err, "error: " + trace_file.string() +
                           ": refusing to overwrite an existing file (use --force)\n");

  // Calibrate from it: GEMMs (5 sweeps + 2 x 2 attention pieces), and every collective curve.
  const fs::path profile_file = tmp.path() / "local.yaml";
  const std::string calibrate =
      "calibrate --traces " + trace_file.string() + " --out " + profile_file.string();
  const auto fit = run_command(orrery(calibrate));
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  pb::CalibrationProfile profile;
  read_spec_file(profile_file, &profile);
  EXPECT_EQ(profile.name(), "local");
  bool gemm = false;
  int gemm_op_curves = 0;
  for (const auto& c : profile.compute()) {
    EXPECT_EQ(c.device(), "local-cpu-core");
    EXPECT_GT(c.max_efficiency(), 0);
    if (c.op_class() == pb::OP_CLASS_COPY) {  // bytes alone: its FLOP parameters are held
      EXPECT_EQ(c.fit().samples(), 3);
      EXPECT_EQ(std::count(c.fit().fitted_params().begin(), c.fit().fitted_params().end(),
                           "max_efficiency"),
                0);
    }
    if (c.op_class() != pb::OP_CLASS_GEMM) continue;
    if (!c.op().empty()) {
      // A curve per op: the GEMM sweep's five sizes are enough; each attention piece's two are not.
      EXPECT_EQ(c.op(), "gemm");
      EXPECT_EQ(c.phase(), pb::PHASE_FORWARD);
      EXPECT_EQ(c.fit().samples(), 5);
      ++gemm_op_curves;
      continue;
    }
    gemm = true;
    EXPECT_EQ(c.fit().samples(), 9);
    // Real measurements of a fixed formula: not exact, but close for most shapes (the bench
    // times compute ops in CPU time, so a loaded machine's scheduling does not land in them).
    std::cout << "GEMM class curve: median |relative error| " << c.fit().median_abs_rel_error()
              << " over " << c.fit().samples() << " samples\n";
    EXPECT_LT(c.fit().median_abs_rel_error(), 0.5);
  }
  EXPECT_TRUE(gemm);
  EXPECT_EQ(gemm_op_curves, 1);
  // Every collective kind gets a curve from its three sizes, unless the machine's noise made its
  // times contradict the model (a larger message no slower than a smaller one: seen once in a
  // CI run with tests running beside the bench), which calibrate then reports for that kind,
  // keeping the default. The timing of a loaded machine is not the test's to control; the
  // report is.
  ASSERT_GE(profile.comm_size(), 1);
  ASSERT_LE(profile.comm_size(), 4);
  std::set<pb::CollectiveKind> fitted;
  for (const auto& c : profile.comm()) {
    EXPECT_EQ(c.scope(), "intra_node");  // a single host: every group stays in one node
    EXPECT_EQ(c.fit().samples(), 3);
    EXPECT_GT(c.bandwidth_bytes_per_s(), 0);
    fitted.insert(c.collective());
  }
  const std::pair<pb::CollectiveKind, const char*> kinds[] = {
      {pb::COLLECTIVE_KIND_ALL_REDUCE, "all_reduce"},
      {pb::COLLECTIVE_KIND_ALL_GATHER, "all_gather"},
      {pb::COLLECTIVE_KIND_REDUCE_SCATTER, "reduce_scatter"},
      {pb::COLLECTIVE_KIND_ALL_TO_ALL, "all_to_all"}};
  for (const auto& [kind, name] : kinds) {
    if (fitted.count(kind) != 0) continue;
    const size_t at = fit.out.find(std::string("intra_node ") + name);
    ASSERT_NE(at, std::string::npos) << name << " has no curve and no report:\n" << fit.out;
    EXPECT_NE(fit.out.find("the samples contradict the model", at), std::string::npos) << fit.out;
  }
  // Deterministic: the same trace gives the same bytes.
  const std::string first = testing::read_file(profile_file);
  const auto refit = run_command(orrery(calibrate + " --force"));
  ASSERT_EQ(refit.exit_code, 0) << refit.err;
  EXPECT_EQ(testing::read_file(profile_file), first);

  // The profile changes what simulate predicts for this machine, and plan takes it too.
  const std::string job = "--model tiny --cluster local --global-batch 4 --seq 64 --precision fp32";
  const auto plain = run_command(orrery("simulate " + job + " --json"));
  const auto calibrated =
      run_command(orrery("simulate " + job + " --json --calibration " + profile_file.string()));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  pb::SimResult a, b;
  parse_spec(testing::result_body(plain.out), "plain.json", SpecFormat::kJson, &a);
  parse_spec(testing::result_body(calibrated.out), "calibrated.json", SpecFormat::kJson, &b);
  EXPECT_NE(a.step_time_s(), b.step_time_s());
  const auto plan = run_command(
      orrery("plan " + job + " --rerank none --quiet --calibration " + profile_file.string()));
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
}

TEST(BenchCli, LeavesTheUsersOpenblasCoretypeAlone) {
  // Set on purpose (the generic kernels), it is neither replaced nor re-executed away.
  const auto bench =
      run_command("OPENBLAS_CORETYPE=Prescott " + orrery("bench --quick --json --ranks 1"));
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const auto j = nlohmann::json::parse(bench.out);
  EXPECT_EQ(j["openblas_coretype"], "OPENBLAS_CORETYPE=Prescott (set in the environment)");
  if (!j["blas_kernels"].get<std::string>().empty()) {
    EXPECT_EQ(j["blas_kernels"], "Prescott");
  }
}

// A run measured by `orrery run --out`, re-simulated node by node with `validate --trace`.
TEST(ValidateTraceCli, ReSimulatesAMeasuredRun) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  const auto run =
      run_command(orrery("run --model tiny --cluster local --tp 2 --dp 1 --global-batch 4 --seq 32 "
                         "--steps 2 --seed 1 --out " +
                         dir.string()));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string trace = (dir / "trace.json").string();

  const auto v = run_command(orrery("validate --trace " + trace + " --json"));
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const auto j = nlohmann::json::parse(v.out);
  EXPECT_EQ(j["engine"], "analytic");
  EXPECT_EQ(j["ranks"], 2);
  pb::ExecGraph measured;
  read_spec_file(trace, &measured);
  EXPECT_DOUBLE_EQ(j["measured_step_s"].get<double>(), measured.measured_step_s());
  EXPECT_DOUBLE_EQ(j["step_error"].get<double>(),
                   j["predicted_step_s"].get<double>() / measured.measured_step_s() - 1);
  // Every timed node is compared: the groups' node counts add up to the trace's nodes.
  int64_t nodes = 0;
  for (const auto& g : j["op_classes"]) nodes += g["nodes"].get<int64_t>();
  for (const auto& g : j["collectives"]) nodes += g["nodes"].get<int64_t>();
  EXPECT_EQ(nodes, measured.ranks(0).nodes_size() + measured.ranks(1).nodes_size());
  EXPECT_EQ(j["op_classes"][0]["name"], "gemm");
  EXPECT_EQ(j["collectives"][0]["name"], "all_reduce");  // tp 2: Megatron's all-reduces

  // Same trace, same report; the des engine draws both timelines side by side.
  EXPECT_EQ(run_command(orrery("validate --trace " + trace + " --json")).out, v.out);
  const fs::path timeline = tmp.path() / "timeline.json";
  const auto des = run_command(
      orrery("validate --trace " + trace + " --engine des --timeline " + timeline.string()));
  ASSERT_EQ(des.exit_code, 0) << des.err;
  const std::string perfetto = testing::read_file(timeline);
  EXPECT_NE(perfetto.find("\"predicted rank 1 (device 1)\""), std::string::npos);
  EXPECT_NE(perfetto.find("\"measured rank 1 (device 1)\""), std::string::npos);
  EXPECT_NE(des.out.find("step error"), std::string::npos) << des.out;
  const auto analytic_timeline =
      run_command(orrery("validate --trace " + trace + " --timeline " + timeline.string()));
  EXPECT_EQ(analytic_timeline.exit_code, 2);
  EXPECT_EQ(analytic_timeline.err,
            "error: --timeline: the analytic engine predicts no timeline; a timeline needs "
            "--engine des\n");

  // A trace whose nodes the lowering does not have is refused, naming the node.
  pb::ExecGraph renamed = measured;
  renamed.mutable_ranks(1)->mutable_nodes(0)->set_name("L0.mb0.fwd.mystery");
  const fs::path bad = tmp.path() / "renamed.json";
  write_file_atomically(bad, to_json(renamed), false);
  const auto refused = run_command(orrery("validate --trace " + bad.string()));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(bad.string() + ": ranks[1].nodes[0].name: node "), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("is 'L0.mb0.fwd.mystery' in the trace but '" +
                             measured.ranks(1).nodes(0).name() + "' in the lowering of its plan"),
            std::string::npos)
      << refused.err;

  // An executor trace is a calibration input too.
  const fs::path profile = tmp.path() / "run.yaml";
  const auto fit =
      run_command(orrery("calibrate --traces " + trace + " --out " + profile.string()));
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  const auto calibrated = run_command(
      orrery("validate --trace " + trace + " --calibration " + profile.string() + " --json"));
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  EXPECT_EQ(nlohmann::json::parse(calibrated.out)["calibration"], profile.string());
}

}  // namespace
}  // namespace orrery
