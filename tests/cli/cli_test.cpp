// The `orrery` binary end to end: what users see, exit codes, files it writes.
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/sim_result.pb.h"
#include "orrery/traces/spec_io.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("orrery_cli_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(Cli, HelpEverywhere) {
  for (const char* cmd :
       {"--help", "model --help", "model show --help", "model flops --help", "model import --help",
        "topo --help", "topo show --help", "topo check --help", "topo discover --help",
        "topo graph --help", "bench --help", "calibrate --help"}) {
    const auto r = run_command(orrery(cmd));
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << cmd;
  }
}

TEST(Cli, NoSubcommandIsAUsageError) {
  const auto r = run_command(orrery(""));
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Cli, ModelShowPrintsTheParameterCount) {
  const auto r = run_command(orrery("model show llama3-8b"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 8.03e9 parameters (Meta's model card), printed in billions with two decimals.
  EXPECT_NE(r.out.find("8.03 B"), std::string::npos) << r.out;
}

TEST(Cli, ModelShowJsonRoundTripsThroughAFile) {
  TempDir tmp;
  const auto first = run_command(orrery("model show deepseek-v3 --json"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const fs::path file = tmp.path() / "my-model.json";
  std::ofstream(file) << first.out;
  const auto again = run_command(orrery("model show " + file.string() + " --json"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(first.out, again.out);
  const auto yaml = run_command(orrery("model show deepseek-v3 --yaml"));
  pb::ModelSpec a, b;
  parse_spec(first.out, "a.json", SpecFormat::kJson, &a);
  parse_spec(yaml.out, "b.yaml", SpecFormat::kYaml, &b);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
}

TEST(Cli, UnknownPresetSuggestsTheNearest) {
  const auto r = run_command(orrery("model show llama3-7b"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("did you mean"), std::string::npos) << r.err;
  const auto t = run_command(orrery("topo show dgx-h10"));
  EXPECT_EQ(t.exit_code, 2);
  EXPECT_NE(t.err.find("did you mean 'dgx-h100'"), std::string::npos) << t.err;
}

TEST(Cli, ModelFlopsJsonIsDeterministic) {
  const std::string cmd = orrery("model flops llama3-70b --seq 8192 --tp 8 --sp --json");
  const auto a = run_command(cmd);
  const auto b = run_command(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out.find("\"training_flops_per_token\""), std::string::npos);
}

TEST(Cli, ModelFlopsRejectsATpThatDoesNotDivideHeads) {
  const auto r = run_command(orrery("model flops llama3-8b --tp 3"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: --tp: got 3, must divide num_attention_heads (32)\n");
}

TEST(Cli, ModelImportWritesAFileAndNeverOverwritesIt) {
  TempDir tmp;
  const std::string config = std::string(ORRERY_TEST_INPUTS) + "/models/hf/llama3-8b/config.json";
  const fs::path out = tmp.path() / "llama.yaml";
  auto r = run_command(orrery("model import " + config + " --name my-llama --out " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pb::ModelSpec spec;
  read_spec_file(out, &spec);
  EXPECT_EQ(spec.name(), "my-llama");
  EXPECT_EQ(spec.num_layers(), 32);
  const auto before = fs::last_write_time(out);
  r = run_command(orrery("model import " + config + " --out " + out.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("refusing to overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(fs::last_write_time(out), before);
  // The imported file is a valid model for every other command.
  r = run_command(orrery("model show " + out.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// An imported Gemma 2: show names its window, pattern and caps; flops costs its local and
// global layers apart (13 of each of the 26).
TEST(Cli, ModelShowAndFlopsOfAWindowedModel) {
  TempDir tmp;
  const std::string config = std::string(ORRERY_TEST_INPUTS) + "/models/hf/gemma2-2b/config.json";
  const fs::path out = tmp.path() / "gemma2.yaml";
  auto r = run_command(orrery("model import " + config + " --out " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_command(orrery("model show " + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4096 tokens, global every 2 layers from layer 1"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("attention 50, final logits 30"), std::string::npos) << r.out;
  r = run_command(orrery("model flops " + out.string() + " --seq 8192"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layer (dense, local) x13"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layer (dense, global) x13"), std::string::npos) << r.out;
}

TEST(Cli, TopoShowJsonIsAValidClusterFile) {
  TempDir tmp;
  const auto r = run_command(orrery("topo show dgx-h100 --nodes 4 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path file = tmp.path() / "c.json";
  std::ofstream(file) << r.out;
  const auto check = run_command(orrery("topo check " + file.string()));
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find(": ok"), std::string::npos);
  pb::ClusterSpec spec;
  read_spec_file(file, &spec);
  int64_t nodes = 0;
  for (const auto& g : spec.node_groups()) nodes += g.count();
  EXPECT_EQ(nodes, 4);
}

TEST(Cli, TopoCheckReportsPairsAndBisection) {
  const auto r = run_command(orrery("topo check dgx-h100 --nodes 2 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"bisection_bytes_per_s\""), std::string::npos);
  EXPECT_NE(r.out.find("\"inter-node pair\""), std::string::npos);
}

TEST(Cli, EveryBadClusterFileExitsWithTwo) {
  const fs::path bad = fs::path(ORRERY_TEST_INPUTS) / "topologies" / "bad";
  int files = 0;
  for (const auto& e : fs::directory_iterator(bad)) {
    const auto r = run_command(orrery("topo check " + e.path().string()));
    EXPECT_EQ(r.exit_code, 2) << e.path();
    EXPECT_EQ(r.err.rfind("error: " + e.path().string() + ":", 0), 0u) << r.err;
    ++files;
  }
  EXPECT_GE(files, 12);
}

TEST(Cli, TopoGraphIsGraphviz) {
  const auto r = run_command(orrery("topo graph dgx-a100 --nodes 2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("graph", 0) == 0 || r.out.rfind("digraph", 0) == 0, true)
      << r.out.substr(0, 80);
}

TEST(Cli, TopoDiscoverDescribesThisMachine) {
  const auto r = run_command(orrery("topo discover --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pb::ClusterSpec spec;
  parse_spec(r.out, "discovered.json", SpecFormat::kJson, &spec);
  ASSERT_EQ(spec.node_groups_size(), 1);
  EXPECT_EQ(spec.node_groups(0).count(), 1);
}

TEST(Cli, MissingFileIsAClearError) {
  const auto r = run_command(orrery("topo check /no/such/cluster.yaml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: /no/such/cluster.yaml: no such file\n");
}

// A path that does not exist is the user's mistake (exit 2, "no such file") in every command that
// reads one, whatever it reads (base/input_file.hpp).
TEST(Cli, MissingFileIsTheSameErrorInEveryCommand) {
  const std::string missing = "/no/such/file.json";
  for (const std::string& args :
       {"model show " + missing, "model import " + missing, "topo check " + missing,
        "simulate --plan " + missing, "validate --runs " + missing,
        "validate --collectives " + missing, "validate --trace " + missing,
        "calibrate --traces " + missing + " --out /tmp/orrery-never-written.yaml"}) {
    const auto r = run_command(orrery(args));
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    // The last line (calibrate says which file it reads first).
    const std::string want = "error: " + missing + ": no such file\n";
    EXPECT_TRUE(r.err.size() >= want.size() &&
                r.err.compare(r.err.size() - want.size(), want.size(), want) == 0)
        << args << "\n"
        << r.err;
  }
}

// CLI11's own errors (an unknown flag, a missing value) start with "error: " as orrery's do.
TEST(Cli, ParseErrorsSayError) {
  for (const char* args : {"simulate --no-such-flag", "simulate --tp", "no-such-command"}) {
    const auto r = run_command(orrery(args));
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << "\n" << r.err;
  }
}

// A plan file's relative model and cluster paths are relative to the plan file: `plan --out`
// writes them so, and the plan then runs from any folder.
TEST(Cli, PlanFilePathsAreRelativeToThePlanFile) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "models");
  fs::create_directories(tmp.path() / "plans");
  const auto model = run_command(orrery("model show tiny --yaml"));
  ASSERT_EQ(model.exit_code, 0) << model.err;
  std::ofstream(tmp.path() / "models" / "mine.yaml") << model.out;
  const auto planned = run_command("cd " + tmp.path().string() + " && " +
                                   orrery("plan --model models/mine.yaml --cluster local "
                                          "--global-batch 4 --rerank none --quiet --top 1 "
                                          "--out plans/best.yaml"));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const std::string file = testing::read_file((tmp.path() / "plans" / "best.yaml").string());
  EXPECT_NE(file.find("model: \"../models/mine.yaml\""), std::string::npos) << file;
  const auto elsewhere = run_command(
      "cd / && " + orrery("simulate --plan " + (tmp.path() / "plans" / "best.yaml").string()));
  EXPECT_EQ(elsewhere.exit_code, 0) << elsewhere.err;
}

// ---- simulate ----

const std::string kSmallJob =
    "simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 2 --pp 2 --global-batch 64 --seq "
    "4096 "
    "--sp --sharding zero1 --overlap-grad-reduce";

// A plan that does not fit says so before any figure, and exits 2 unless --allow-oom.
TEST(Cli, SimulateOfAPlanThatDoesNotFitSaysSoAndFails) {
  const std::string job =
      "simulate --model llama3-405b --cluster dgx-h100 --nodes 1 --tp 8 --global-batch 8 --seq "
      "4096";
  const auto r = run_command(orrery(job));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out.rfind("OUT OF MEMORY: rank 0 peaks at ", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("error: memory: the plan does not fit: rank 0 peaks at "), std::string::npos)
      << r.err;
  const auto allowed = run_command(orrery(job + " --allow-oom"));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_EQ(allowed.out, r.out);
  const auto fits = run_command(orrery(kSmallJob));
  EXPECT_EQ(fits.out.find("OUT OF MEMORY"), std::string::npos);
}

// A des run over its budget is refused before it starts, naming the flag that raises it: the
// 16,384-GPU all-ranks run that used to grow to 14 GB and die of signal 11.
TEST(CliSimulate, DesOverItsBudgetIsRefusedNamingTheFlag) {
  const auto big = run_command(
      orrery("simulate --model llama3-70b --cluster dgx-h100 --nodes 2048 --tp 8 --pp 16 --sp "
             "--global-batch 2048 --seq 8192 --engine des --all-ranks"));
  EXPECT_EQ(big.exit_code, 2) << big.err;
  EXPECT_NE(big.err.find("error: --des-budget: des would simulate "), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("on 16384 ranks"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("over its budget of 12000000 nodes"), std::string::npos) << big.err;
  EXPECT_TRUE(big.out.empty()) << big.out;
  const auto small = run_command(orrery(kSmallJob + " --engine des --des-budget 10"));
  EXPECT_EQ(small.exit_code, 2) << small.err;
  EXPECT_NE(small.err.find("over its budget of 10 nodes (--des-budget 10; raise it"),
            std::string::npos)
      << small.err;
  const auto unlimited = run_command(orrery(kSmallJob + " --engine des --des-budget 0"));
  EXPECT_EQ(unlimited.exit_code, 0) << unlimited.err;
}

TEST(CliSimulate, PrintsAReadableReport) {
  const auto r = run_command(orrery(kSmallJob));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"step time", "tokens/s", "MFU / HFU", "where the step goes", "compute",
                           "pipeline bubble", "memory per pipeline rank", "tp2 pp2 dp2 sp"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
}

TEST(CliSimulate, JsonIsASimResultWhoseBreakdownAddsUp) {
  const auto a = run_command(orrery(kSmallJob + " --json"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, run_command(orrery(kSmallJob + " --json")).out);  // same bytes
  pb::SimResult r;
  parse_spec(testing::result_body(a.out), "result.json", SpecFormat::kJson, &r);
  ASSERT_GT(r.step_time_s(), 0);
  double sum =
      r.breakdown().compute_s() + r.breakdown().pipeline_bubble_s() + r.breakdown().optimizer_s();
  for (const auto& c : r.breakdown().exposed_comm()) sum += c.seconds();
  EXPECT_NEAR(sum, r.step_time_s(), 1e-9 * r.step_time_s());
  EXPECT_EQ(r.memory_size(), 2);  // one entry per pipeline rank
  EXPECT_GT(r.mfu(), 0.05);
  EXPECT_LT(r.mfu(), 1.0);
}

TEST(CliSimulate, PlanFileAndFlagsAgree) {
  TempDir tmp;
  const fs::path plan = tmp.path() / "plan.yaml";
  std::ofstream(plan) << "model: llama3-8b\ncluster: dgx-h100\nnodes: 1\n"
                         "job: {global_batch_size: 64, seq_len: 4096, precision: bf16}\n"
                         "parallel: {tp: 2, pp: 2, dp: 2, sequence_parallel: true}\n"
                         "sharding: zero1\noverlap_grad_reduce: true\nmicro_batch_size: 1\n";
  const auto from_file = run_command(orrery("simulate --plan " + plan.string() + " --json"));
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(from_file.out, run_command(orrery(kSmallJob + " --json")).out);
}

TEST(CliSimulate, ABrokenRuleIsNamedWithItsField) {
  const auto r =
      run_command(orrery("simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 3 "
                         "--dp 1 --global-batch 8"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.err.find("parallel.tp: rule tp-divides-heads: tp 3 must divide num_attention_heads 32"),
      std::string::npos)
      << r.err;
}

TEST(CliSimulate, BadFlagValuesAreRejected) {
  const std::string job =
      "simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 64";
  auto r = run_command(orrery(job + " --sharding zero4"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sharding: got 'zero4' (did you mean"), std::string::npos) << r.err;
  r = run_command(orrery(job + " --bucket '25 furlongs'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--bucket: unknown unit 'furlongs'"), std::string::npos) << r.err;
}

TEST(CliSimulate, DesAgreesWithAnalyticAndWritesAPerfettoTimeline) {
  TempDir tmp;
  const fs::path trace = tmp.path() / "timeline.json";
  const auto des =
      run_command(orrery(kSmallJob + " --engine des --json --trace " + trace.string()));
  ASSERT_EQ(des.exit_code, 0) << des.err;
  pb::SimResult d, a;
  parse_spec(testing::result_body(des.out), "des.json", SpecFormat::kJson, &d);
  parse_spec(testing::result_body(run_command(orrery(kSmallJob + " --json")).out), "analytic.json",
             SpecFormat::kJson, &a);
  EXPECT_EQ(d.engine(), "des");
  // One node's NVSwitch and its NICs carry no competing traffic here: the engines agree.
  EXPECT_NEAR(d.step_time_s(), a.step_time_s(), 0.02 * a.step_time_s());
  const auto j = nlohmann::json::parse(std::ifstream(trace));
  int tracks = 0, events = 0;
  for (const auto& e : j["traceEvents"]) {
    tracks += e["ph"] == "M" && e["name"] == "thread_name";
    events += e["ph"] == "X";
  }
  EXPECT_GT(tracks, 8);
  EXPECT_GT(events, 1000);
  // The analytic engine has no timeline to write.
  const auto r = run_command(orrery(kSmallJob + " --trace " + (tmp.path() / "x.json").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--trace: the analytic engine predicts no timeline"), std::string::npos)
      << r.err;
}

// ---- plan ----

TEST(CliPlan, RanksPlansAndWritesTheWinnerAsAPlanFile) {
  TempDir tmp;
  const fs::path best = tmp.path() / "best.yaml";
  const std::string job =
      "plan --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 64 --seq 4096";
  // Ranked by the analytic engine alone here, so `simulate` (analytic) must reproduce the time.
  const auto r = run_command(orrery(job + " --top 3 --quiet --rerank none --out " + best.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("why #1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("limited by"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(best));
  // The written plan is accepted by simulate and predicts the step time the table ranked first.
  const auto sim = run_command(orrery("simulate --plan " + best.string() + " --json"));
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  pb::SimResult result;
  parse_spec(testing::result_body(sim.out), "sim.json", SpecFormat::kJson, &result);
  const auto ranked =
      nlohmann::json::parse(run_command(orrery(job + " --top 3 --quiet --rerank none --json")).out);
  ASSERT_FALSE(ranked["plans"].empty()) << ranked.dump();
  EXPECT_DOUBLE_EQ(ranked["plans"][0]["result"]["step_time_s"].get<double>(), result.step_time_s());
  // Never overwrites without --force.
  EXPECT_EQ(run_command(orrery(job + " --top 1 --quiet --out " + best.string())).exit_code, 2);
}

TEST(CliPlan, BestPlansAreRankedWithTheDiscreteEventEngine) {
  const auto r =
      run_command(orrery("plan --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 64 "
                         "--seq 4096 --top 2 --quiet --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "orrery.plan");
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["engine"], "analytic");
  EXPECT_EQ(j["rerank"]["engine"], "des");
  EXPECT_EQ(j["rerank"]["plans"], 5);
  EXPECT_EQ(j["rerank"]["skipped"], "");
  ASSERT_EQ(j["plans"].size(), 2u);
  EXPECT_EQ(j["plans"][0]["result"]["engine"], "des");
  EXPECT_LE(j["plans"][0]["result"]["step_time_s"].get<double>(),
            j["plans"][1]["result"]["step_time_s"].get<double>());
  EXPECT_EQ(
      run_command(
          orrery(
              "plan --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 64 --rerank ds"))
          .exit_code,
      2);
}

TEST(CliPlan, JsonIsDeterministic) {
  const std::string cmd = orrery(
      "plan --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 64 "
      "--seq 4096 --top 5 --quiet --json");
  const auto a = run_command(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, run_command(cmd).out);
}

// ---- validate ----

fs::path shared_file(const char* name) {
  return fs::path(ORRERY_SOURCE_DIR) / ".." / "shared" / "validation" / name;
}

TEST(CliValidate, PublishedRunsMeetTheErrorGoal) {
  if (!fs::exists(shared_file("public_runs.json")))
    GTEST_SKIP() << "shared/validation not beside the checkout";
  const auto r = run_command(
      orrery("validate --runs " + shared_file("public_runs.json").string() + " --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j["simulated"].get<int>(), 20);
  // The issue's goal: median absolute step-time error <= 10% without per-case constants.
  EXPECT_LE(j["median_abs_error"].get<double>(), 0.10);
  const auto table =
      run_command(orrery("validate --runs " + shared_file("public_runs.json").string()));
  EXPECT_NE(table.out.find("median |error|"), std::string::npos);
}

TEST(CliValidate, CollectiveTablesPrintPerRowAndSummary) {
  if (!fs::exists(shared_file("public_collectives.json")))
    GTEST_SKIP() << "shared/validation not beside the checkout";
  const auto r = run_command(
      orrery("validate --collectives " + shared_file("public_collectives.json").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rows compared"), std::string::npos);
  EXPECT_NE(r.out.find("echo-ndv4-ar-16"), std::string::npos);
}

// A case that cannot be read is skipped with the field and reason; a file of which no case could
// be simulated is an input error (status 2), one with some simulated exits 0.
TEST(CliValidate, UnreadableCasesAreSkippedWithTheField) {
  TempDir tmp;
  const fs::path f = tmp.path() / "runs.json";
  std::ofstream(f) << R"({"cases": [{"id": "x", "measured": {"iter_time_s": 1.0},
    "hardware": {"gpu": "A100-SXM4-80GB", "num_gpus": "eight", "gpus_per_node": 8}}]})";
  const auto r = run_command(orrery("validate --runs " + f.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("x  " + f.string() +
                       ": cases[0].hardware.num_gpus: expected a positive integer, got \"eight\""),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.err, "error: " + f.string() + ": none of its 1 entries could be simulated\n");
  EXPECT_EQ(run_command(orrery("validate")).exit_code, 2);

  const fs::path readers =
      fs::path(ORRERY_SOURCE_DIR) / "tests" / "inputs" / "sim" / "runs" / "readers.json";
  const auto some = run_command(orrery("validate --runs " + readers.string() + " --json"));
  ASSERT_EQ(some.exit_code, 0) << some.err;
  const auto j = nlohmann::json::parse(some.out);
  EXPECT_EQ(j["simulated"].get<int>(), 15);
  // Two fp8 recipe cases (17, 18), two malformed model variants (19, 20) and a case naming two
  // flash generations (22) among them, HSDP without its shard group (25), a shard group without
  // HSDP (26), a moe_a2a_overlap that is no boolean (28), a stated cluster without the GPU's
  // generation (31), a PCIe part without a cluster (32) and an unknown cluster (33).
  EXPECT_EQ(j["skipped"].get<int>(), 19);
  EXPECT_EQ(j["cases"][15]["skipped"].get<std::string>(),
            readers.string() +
                ": cases[15].hardware.num_gpus: expected a positive integer, got \"eight\"");
  // Every case has every key, simulated or skipped: the shape never depends on the values.
  std::set<std::string> keys;
  for (const auto& [key, value] : j["cases"][0].items()) keys.insert(key);
  for (const auto& c : j["cases"]) {
    std::set<std::string> these;
    for (const auto& [key, value] : c.items()) these.insert(key);
    EXPECT_EQ(these, keys) << c.dump();
    EXPECT_EQ(c["skipped"].get<std::string>().empty(), !c["predicted_step_s"].is_null());
  }
}

// simulate --json: the same keys, all of them, whether a plan fits or not and whatever its terms.
TEST(CliSimulate, JsonShapeDoesNotDependOnTheValues) {
  const auto fits = run_command(orrery(kSmallJob + " --json"));
  const auto oom = run_command(
      orrery("simulate --model llama3-405b --cluster dgx-h100 --nodes 1 --tp 8 --global-batch 8 "
             "--seq 4096 --json --allow-oom"));
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  ASSERT_EQ(oom.exit_code, 0) << oom.err;
  const auto a = nlohmann::json::parse(fits.out), b = nlohmann::json::parse(oom.out);
  EXPECT_EQ(a["schema"], "orrery.simulate");
  EXPECT_EQ(a["schema_version"], 1);
  // Key paths of a JSON value, arrays by their first element.
  std::function<void(const nlohmann::json&, const std::string&, std::set<std::string>&)> paths =
      [&](const nlohmann::json& v, const std::string& at, std::set<std::string>& out) {
        out.insert(at);
        if (v.is_object()) {
          for (const auto& [key, value] : v.items()) paths(value, at + "." + key, out);
        } else if (v.is_array() && !v.empty()) {
          paths(v[0], at + "[]", out);
        }
      };
  std::set<std::string> pa, pb;
  paths(a, "", pa);
  paths(b, "", pb);
  EXPECT_EQ(pa, pb);
  EXPECT_TRUE(pa.count(".memory[].oom") && pa.count(".memory[].rank") &&
              pa.count(".breakdown.pipeline_bubble_s"));
  EXPECT_FALSE(a["memory"][0]["oom"].get<bool>());
  EXPECT_TRUE(b["memory"][0]["oom"].get<bool>());
}

}  // namespace
}  // namespace orrery
