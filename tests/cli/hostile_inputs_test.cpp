// Hostile numbers and inputs end to end: NaN, inf, absurd sizes, directories and empty lists are
// refused by the `orrery` binary with exit status 2 and a message naming the flag or field,
// never an internal error (70), a hang, or a silent acceptance (issue 28).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

// A folder of its own per test process, removed at the end.
class Scratch {
 public:
  Scratch() : path_(fs::temp_directory_path() / ("orrery_hostile_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~Scratch() { fs::remove_all(path_); }
  fs::path file(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return path_ / name;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `args` and expects exit status 2 and exactly `message` on stderr.
void expect_refused(const std::string& args, const std::string& message) {
  const auto r = run_command(orrery(args));
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.err, message) << args;
  EXPECT_EQ(r.out, "") << args;
}

const std::string kSimulate =
    "simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 64";
const std::string kPlan = "plan --model llama3-8b --cluster dgx-h100 --global-batch 64 --quiet";

TEST(CliHostile, NotANumberAndInfinityAreRefusedInFlags) {
  expect_refused(kSimulate + " --moe-imbalance nan",
                 "error: --moe-imbalance: got nan, expected a finite number\n");
  expect_refused(kSimulate + " --moe-imbalance inf",
                 "error: --moe-imbalance: got inf, expected a finite number\n");
  // CLI11's own validation message, followed by its hint to run --help.
  const auto r = run_command(orrery(kPlan + " --nodes 1 --rerank-budget nan"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("error: --rerank-budget: got nan, expected a finite number\n", 0), 0u)
      << r.err;
}

TEST(CliHostile, NegativeAndAbsurdSizesNameTheirFlag) {
  expect_refused(kSimulate + " --bucket -1MiB",
                 "error: --bucket: got -1MiB, expected a value >= 0\n");
  // CLI11 reads an integer too large for int64 as its largest value, which the range refuses.
  expect_refused(kPlan + " --nodes 99999999999999999999",
                 "error: --nodes: got 9223372036854775807, expected at most 1000000 (10x the "
                 "largest cluster built)\n");
  const std::string nodes =
      "--nodes: got 1000000000, expected at most 1000000 (10x the largest cluster built)\n";
  expect_refused(kPlan + " --nodes 1000000000", "error: " + nodes);
  expect_refused(
      "simulate --model llama3-8b --cluster dgx-h100 --global-batch 64 --nodes 1000000000",
      "error: " + nodes);
  expect_refused("topo check dgx-h100 --nodes 1000000000", "error: " + nodes);
  expect_refused(
      "plan --model llama3-8b --cluster dgx-h100 --quiet --nodes 1 --global-batch 1000000000",
      "error: --global-batch: got 1000000000, expected at most 100000000 (10,000x the "
      "largest published batch)\n");
}

// An empty value is refused naming its flag on every command, number or text (CLI11 would read
// it as the flag left out or as 0): found by the #28 close-out audit for --moe-imbalance,
// --shard-group, --prefetch, --tp-comm-overlap-chunks and --seed, which exited 0.
TEST(CliHostile, AnEmptyValueIsRefusedNamingItsFlag) {
  for (const std::string& args :
       {kSimulate + " --moe-imbalance ''", kSimulate + " --shard-group ''",
        kSimulate + " --prefetch ''", kSimulate + " --tp-comm-overlap-chunks ''",
        kPlan + " --nodes 1 --precision ''", kPlan + " --nodes 1 --tp ''",
        std::string("goodput --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 16 "
                    "--seed ''")}) {
    const auto r = run_command(orrery(args));
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    const std::string flag =
        args.substr(args.rfind(" --") + 1, args.rfind(" ''") - args.rfind(" --") - 1);
    EXPECT_EQ(r.err.rfind("error: " + flag + ": got an empty value, expected one", 0), 0u)
        << args << "\n"
        << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
}

// model flops checks its degrees and sizes by the plan fields' ranges: a saturated
// 99999999999999999999 printed negative shapes and exit 0 before (#28 close-out audit).
TEST(CliHostile, ModelFlopsChecksItsSizesLikeAPlan) {
  expect_refused("model flops llama3-8b --seq 99999999999999999999",
                 "error: --seq: got 9223372036854775807, expected at most 1000000000 (100x the "
                 "longest context published)\n");
  const auto r = run_command(orrery("model flops llama3-8b --micro-batch 99999999999999999999"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("error: --micro-batch: got 9223372036854775807", 0), 0u) << r.err;
}

// --host-memory sizes the reading of a --trace; with --runs it was ignored, even as nan.
TEST(CliHostile, HostMemoryWithoutATraceIsRefused) {
  const auto r = run_command(orrery("validate --runs " + std::string(ORRERY_SOURCE_DIR) +
                                    "/validation/data/runs.json --host-memory nan"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("error: --host-memory requires --trace", 0), 0u) << r.err;
}

TEST(CliHostile, APlanSearchWithoutAPlanSaysWhyAndFails) {
  expect_refused(
      kPlan + " --nodes 1 --tp 3",
      "error: plan: no tp x cp x pp x dp shape of the allowed degrees (--tp, --pp, --cp, "
      "--vp) divides the cluster's 8 devices\n");
}

TEST(CliHostile, AClusterWithAnAbsurdLatencyIsRefusedBeforeAnySimulation) {
  Scratch s;
  const auto show = run_command(orrery("topo show dgx-h100 --nodes 2 --yaml"));
  ASSERT_EQ(show.exit_code, 0) << show.err;
  std::string yaml = show.out;
  const auto at = yaml.find("switch_latency_s: ");
  ASSERT_NE(at, std::string::npos) << yaml;
  yaml.replace(at, yaml.find('\n', at) - at, "switch_latency_s: 1e308");
  const fs::path cluster = s.file("c.yaml", yaml);
  const auto line =
      std::count(yaml.begin(), yaml.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1;
  const std::string message = "error: " + cluster.string() + ":" + std::to_string(line) +
                              ": fabric.switch_latency_s: got 1e308, expected at most 100 ms (a "
                              "round trip across a continent; cluster links take microseconds)\n";
  expect_refused("topo check " + cluster.string(), message);
  expect_refused("simulate --model llama3-8b --cluster " + cluster.string() + " --global-batch 64",
                 message);
}

TEST(CliHostile, ValidateRefusesDirectoriesAndEmptyLists) {
  Scratch s;
  const std::string dir = s.path().string();
  expect_refused("validate --runs " + dir,
                 "error: " + dir + ": is a directory, expected a JSON file\n");
  const fs::path runs = s.file("runs.json", R"({"cases": []})");
  expect_refused(
      "validate --runs " + runs.string(),
      "error: " + runs.string() + ": cases: got an empty list, expected at least one case\n");
  const fs::path tables = s.file("tables.json", R"({"tables": []})");
  expect_refused("validate --collectives " + tables.string(),
                 "error: " + tables.string() +
                     ": tables: got an empty list, expected at least one measured table\n");
}

// A stage degree below 1 is refused naming --stage-tp and the plan rule's bound; it was refused
// with a misleading reason (that --dp was missing) before (#28 close-out).
TEST(CliHostile, AStageDegreeBelowOneNamesItsFlag) {
  expect_refused(kSimulate + " --stage-tp -1",
                 "error: --stage-tp: got -1, a degree is at least 1\n");
  expect_refused(kSimulate + " --stage-dp 8,0",
                 "error: --stage-dp: got 0, a degree is at least 1\n");
}

// The validation data files refuse a key written twice in one object (JSON would keep the last
// one silently), naming the key's path, as the spec reader does for plan and cluster files.
TEST(CliHostile, ValidationFilesRefuseDuplicateKeys) {
  Scratch s;
  const fs::path tables =
      s.file("tables.json", R"({"tables": [{"id": "a"}, {"id": "b", "rows": [{"bytes": 1,
      "bytes": 2}]}]})");
  expect_refused("validate --collectives " + tables.string(),
                 "error: " + tables.string() +
                     ": tables[1].rows[0].bytes: appears twice in one object (JSON keeps only the "
                     "last)\n");
  const fs::path runs = s.file("runs.json", R"({"cases": [], "cases": [{}]})");
  expect_refused("validate --runs " + runs.string(),
                 "error: " + runs.string() +
                     ": cases: appears twice in one object (JSON keeps only the last)\n");
}

// A measured table row: bytes and time within physical bounds (docs/formats.md says why), and
// the printed bandwidths, which the validation does not read, still numbers >= 0.
TEST(CliHostile, CollectiveRowsAreBoundedAndEveryColumnChecked) {
  Scratch s;
  const std::string table =
      R"({"tables": [{"id": "t", "system": "DGX H100", "gpu": "H100", "collective": "all_reduce",
      "gpus": 8, "nodes": 1, "gpus_per_node": 8, "rows": [ROW]}]})";
  const auto refused = [&](const std::string& row, const std::string& reason) {
    std::string text = table;
    text.replace(text.find("ROW"), 3, row);
    const fs::path f = s.file("t.json", text);
    expect_refused("validate --collectives " + f.string(),
                   "error: " + f.string() + ": tables[0].rows[0]." + reason + "\n");
  };
  refused(R"({"bytes": 1e20, "time_us": 10})",
          "bytes: got 1e+20, expected at most 1125899906842624 (1 PiB: no GPU holds a buffer that "
          "large; nccl-tests tables stop at tens of GB)");
  refused(R"({"bytes": 8, "time_us": 1e308})",
          "time_us: got 1e+308, expected at most 8.64e+10 (a day; nccl-tests times one "
          "collective in microseconds to seconds)");
  refused(R"({"bytes": 8, "time_us": 10, "algbw_GBps": ""})",
          "algbw_GBps: got \"\", expected a finite number >= 0");
  refused(R"({"bytes": 8, "time_us": 10, "busbw_GBps": -1})",
          "busbw_GBps: got -1, expected a finite number >= 0");
  refused(R"({"bytes": 8, "time_us": 10, "busbw_GBps": 1e308})",
          "busbw_GBps: got 1e+308, expected at most 1e+06 (1 PB/s is 500x NVLink 5)");
}

// A published run's measured numbers are checked when present, read or not: the case is
// skipped naming the field, and a file of that case alone is refused.
TEST(CliHostile, PublishedRunNumbersAreBounded) {
  Scratch s;
  std::ifstream in(std::string(ORRERY_SOURCE_DIR) + "/validation/data/runs.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string step = "\"iter_time_s\": 2.8435";
  ASSERT_NE(text.find(step), std::string::npos);
  text.replace(text.find(step), step.size(), "\"iter_time_s\": 1e308");
  const fs::path runs = s.file("runs.json", text);
  const auto r = run_command(orrery("validate --runs " + runs.string()));
  EXPECT_NE((r.out + r.err)
                .find(runs.string() +
                      ": cases[0].derived.iter_time_s: got 1e+308, expected at most 86400 (a day; "
                      "published training steps take seconds)"),
            std::string::npos)
      << r.out << r.err;
}

// `orrery run` is built only with the executor (libtorch); without it these have nothing to run.
bool run_is_built() {
  return run_command(orrery("run --help")).out.find("--lr") != std::string::npos;
}

TEST(CliHostile, RunFlagsRefuseNotANumber) {
  if (!run_is_built()) GTEST_SKIP() << "orrery was built without the executor";
  const std::string job =
      "run --model tiny --cluster local --dp 1 --global-batch 2 --seq 32 --steps 1";
  for (const char* flag : {"--clip-grad", "--timeout", "--lr"}) {
    const auto r = run_command(orrery(job + " " + flag + " nan"));
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.err;
    EXPECT_EQ(
        r.err.rfind("error: " + std::string(flag) + ": got nan, expected a finite number\n", 0), 0u)
        << r.err;
  }
}

// A learning rate far too large makes the loss NaN: the run stops at that step naming it and the
// rank, the step files before it are whole, and none is written for it.
TEST(CliHostile, ADivergedLossStopsTheRunNamingTheStepAndRank) {
  if (!run_is_built()) GTEST_SKIP() << "orrery was built without the executor";
  Scratch s;
  const fs::path out = s.path() / "run";
  const auto r =
      run_command(orrery("run --model tiny --cluster local --dp 1 --global-batch 2 --seq 32 "
                         "--steps 4 --seed 3 --lr 1e308 --out " +
                         out.string()));
  const std::string all = r.out + r.err;  // the launcher passes the rank's words through
  EXPECT_NE(r.exit_code, 0) << all;
  EXPECT_NE(r.exit_code, 70) << all;
  const auto at = all.find("rank 0: step ");
  ASSERT_NE(at, std::string::npos) << all;
  const int step = std::stoi(all.substr(at + 13));
  EXPECT_NE(all.find("training diverged (a smaller --lr, or --clip-grad, keeps it finite); "
                     "stopped before writing step " +
                     std::to_string(step)),
            std::string::npos)
      << all;
  char name[32];
  for (int i = 1; i <= step; ++i) {
    std::snprintf(name, sizeof name, "step_%06d.json", i);
    EXPECT_EQ(fs::exists(out / name), i < step) << name;
  }
}

}  // namespace
}  // namespace orrery
