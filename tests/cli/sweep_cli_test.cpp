// `orrery sweep` and the --csv outputs end to end: points simulated as simulate does, what-if
// monotonicity, one row per point, refused axes, and CSV that parses back to its header's width.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

// A plan of 8-GPU nodes whose data-parallel gradient reduction crosses the network; a sweep
// varies what its base leaves out (an axis whose flag is given too is refused).
const std::string kModel = "--model llama3-8b --cluster dgx-h100 --tp 4 ";
const std::string kJob = kModel + "--nodes 2 --global-batch 32 --seq 4096 ";

// RFC 4180 records (fields, quotes doubled inside quoted fields); "\n" ends a record.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    auto& field = rows.back().back();
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else {
      field += c;
    }
  }
  EXPECT_FALSE(quoted) << "an unterminated quoted field";
  EXPECT_EQ(rows.back(), std::vector<std::string>(1)) << "the last line lacks its newline";
  rows.pop_back();
  return rows;
}

// Every record as wide as the header; returns the records after it.
std::vector<std::vector<std::string>> csv_records(const std::string& text) {
  auto rows = parse_csv(text);
  EXPECT_FALSE(rows.empty());
  for (const auto& r : rows) EXPECT_EQ(r.size(), rows.front().size()) << text;
  return rows;
}

nlohmann::json sweep_json(const std::string& args) {
  const auto r = run_command(orrery("sweep " + args + " --json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(Sweep, AFasterNetworkNeverMakesAStepSlower) {
  const auto j = sweep_json(
      kModel + "--global-batch 32 --seq 4096 --vary nodes=2,4 --vary nic-bandwidth=0.5,1,2,4");
  ASSERT_EQ(j["points"].size(), 8u);
  for (size_t n = 0; n < 2; ++n) {
    for (size_t b = 1; b < 4; ++b) {
      const auto& slower = j["points"][n * 4 + b - 1];
      const auto& faster = j["points"][n * 4 + b];
      EXPECT_EQ(faster["values"]["nic-bandwidth"].get<double>(),
                2 * slower["values"]["nic-bandwidth"].get<double>());
      EXPECT_LE(faster["step_time_s"].get<double>(), slower["step_time_s"].get<double>())
          << faster["values"].dump();
    }
    // Halving the network against quadrupling it: the reduction crosses it, so it shows.
    EXPECT_LT(j["points"][n * 4 + 3]["step_time_s"].get<double>(),
              j["points"][n * 4]["step_time_s"].get<double>());
  }
}

TEST(Sweep, NicLatencyAndLinkScalesMoveTheStepTheRightWay) {
  for (const char* axis : {"nic-latency=4,1", "link-latency=4,1", "link-bandwidth=0.5,2"}) {
    const auto j = sweep_json(kJob + "--vary " + axis);
    ASSERT_EQ(j["points"].size(), 2u);
    EXPECT_LE(j["points"][1]["step_time_s"].get<double>(),
              j["points"][0]["step_time_s"].get<double>())
        << axis;
  }
}

TEST(Sweep, OneRowPerPointInTheTableCsvAndJson) {
  const std::string args =
      kModel +
      "--nodes 2 --global-batch 32 --vary seq=2048,4096,8192 --vary device=H100-SXM,H200-SXM";
  const auto table = run_command(orrery("sweep " + args));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  // Rows start with the point number after the header and its rule.
  int rows = 0;
  for (size_t at = table.out.find("\n-"); at != std::string::npos;) {
    at = table.out.find('\n', at + 1);
    if (at == std::string::npos || at + 1 >= table.out.size() || table.out[at + 1] == '\n') break;
    ++rows;
  }
  EXPECT_EQ(rows, 6) << table.out;
  const auto csv = run_command(orrery("sweep " + args + " --csv"));
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const auto records = csv_records(csv.out);
  ASSERT_EQ(records.size(), 7u);
  EXPECT_EQ(records[0][0], "point");
  EXPECT_EQ(records[0][1], "seq");
  EXPECT_EQ(records[0][2], "device");
  EXPECT_EQ(records[6][1], "8192");
  EXPECT_EQ(records[6][2], "H200-SXM");
  EXPECT_EQ(sweep_json(args)["points"].size(), 6u);
}

TEST(Sweep, APointIsWhatSimulatePrintsForIt) {
  const auto sweep = run_command(
      orrery("sweep " + kModel + "--nodes 2 --seq 4096 --vary global-batch=16,64,32 --csv"));
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const auto points = csv_records(sweep.out);
  ASSERT_EQ(points.size(), 4u);
  const auto simulate = run_command(orrery("simulate " + kJob + "--csv"));
  ASSERT_EQ(simulate.exit_code, 0) << simulate.err;
  const auto one = csv_records(simulate.out);
  ASSERT_EQ(one.size(), 2u);
  // The sweep's columns after `point` and `global-batch` are simulate's, header and values.
  EXPECT_EQ(std::vector<std::string>(points[0].begin() + 2, points[0].end()), one[0]);
  EXPECT_EQ(std::vector<std::string>(points[3].begin() + 2, points[3].end()), one[1]);
}

TEST(Sweep, SameInputsSameBytes) {
  const std::string cmd = orrery("sweep " + kJob + "--vary nic-bandwidth=1,2 --json");
  const auto a = run_command(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, run_command(cmd).out);
}

TEST(Sweep, RefusesBadAxesNamingTheFlagAndReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--vary bandwidth=1,2", "not an axis"},
      {"--vary nodes", "expected NAME=V1,V2"},
      {"--vary nic-bandwidth=0,2", "positive scale"},
      {"--vary nic-bandwidth=fast", "positive scale"},
      {"--vary nodes=2,2", "given twice"},
      {"--vary nodes=2,,4", "empty value"},
      {"--vary device=H900", "at device=H900: device: got 'H900'"},
      {"--vary micro-batch=abc", "micro-batch=abc"},
      {"--vary micro-batch=1 --vary micro-batch=2", "varied twice"},
      {"--vary micro-batch=1 --vary pp=1 --vary cp=1", "one or two"},
      {"--vary tp=2,4", "--tp is given too"}};
  for (const auto& [args, reason] : cases) {
    const auto r = run_command(orrery("sweep " + kJob + args));
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("--vary"), std::string::npos) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << args << "\n" << r.err;
  }
  // A point that breaks a plan rule (dp 4 does not divide a batch of 3) names the point.
  const auto r =
      run_command(orrery("sweep " + kModel + "--nodes 2 --seq 4096 --vary global-batch=32,3"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--vary: at global-batch=3"), std::string::npos) << r.err;
}

TEST(Csv, SimulateAndPlanPrintTheirTableAsCsv) {
  const auto sim = run_command(orrery("simulate " + kJob + "--csv"));
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const auto one = csv_records(sim.out);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0][9], "step_time_s");
  EXPECT_GT(std::stod(one[1][9]), 0);
  const auto plan = run_command(
      orrery("plan --model llama3-8b --cluster dgx-h100 --nodes 1 --global-batch 16 --seq 4096 "
             "--rerank none --top 3 --quiet --csv"));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto ranked = csv_records(plan.out);
  ASSERT_EQ(ranked.size(), 4u);
  EXPECT_EQ(ranked[1][0], "1");
  EXPECT_LE(std::stod(ranked[1][2]), std::stod(ranked[2][2]));
  const auto both = run_command(orrery("simulate " + kJob + "--csv --json"));
  EXPECT_EQ(both.exit_code, 2);
}

TEST(Csv, ValidateRunsAndCollectivesParseBack) {
  const std::string shared = std::string(ORRERY_SOURCE_DIR) + "/../shared/validation/";
  if (!std::filesystem::exists(shared + "public_runs.json"))
    GTEST_SKIP() << "no " << shared << "public_runs.json here";
  const auto runs = run_command(orrery("validate --runs " + shared + "public_runs.json --csv"));
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  const auto cases = csv_records(runs.out);
  ASSERT_GT(cases.size(), 1u);
  EXPECT_EQ(cases[0][0], "case");
  const auto coll =
      run_command(orrery("validate --collectives " + shared + "public_collectives.json --csv"));
  ASSERT_EQ(coll.exit_code, 0) << coll.err;
  ASSERT_GT(csv_records(coll.out).size(), 1u);
}

TEST(Csv, ValidateHoldoutHasARowPerCase) {
  const std::string runs = std::string(ORRERY_SOURCE_DIR) + "/validation/data/runs.json";
  const auto holdout = run_command(orrery("validate --runs " + runs + " --holdout-by gpu --csv"));
  ASSERT_EQ(holdout.exit_code, 0) << holdout.err;
  const auto rows = csv_records(holdout.out);
  EXPECT_EQ(rows[0][0], "family");
  const auto plain = run_command(orrery("validate --runs " + runs + " --csv"));
  EXPECT_EQ(rows.size(), csv_records(plain.out).size()) << "one row per case";
}

}  // namespace
}  // namespace orrery
