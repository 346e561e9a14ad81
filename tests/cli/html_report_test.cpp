// The --html pages in a real browser: Debian's chromium, headless, renders each page offline; the
// test reads the DOM it ends with and the console it logged. Every chart must have drawn an svg,
// nothing may reach the console (an error, or a Vega warning), and the values each drawn view
// holds (the page copies them into data-values) must be the numbers of the command's --json.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_file;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

// A page as the browser left it.
struct Rendered {
  std::string dom;
  std::vector<std::string> console;  // lines the page logged
  std::vector<json> values;          // data-values of each chart, in page order
};

class HtmlReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("orrery_html_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `args` with --html PAGE --json; returns the JSON it printed.
  json run_with_page(const std::string& args, const std::string& page) const {
    const auto r = run_command(orrery(args + " --html " + path(page) + " --json"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  }

  Rendered render(const std::string& page) const;

 private:
  fs::path dir_;
};

// An attribute value as the DOM dump writes it: &quot; &amp; &lt; &gt; and &nbsp; decoded.
std::string unescape(const std::string& s) {
  static const std::map<std::string, std::string> kEntities = {
      {"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&nbsp;", "\u00a0"}};
  std::string out;
  for (size_t i = 0; i < s.size();) {
    bool decoded = false;
    for (const auto& [entity, text] : kEntities) {
      if (s.compare(i, entity.size(), entity) == 0) {
        out += text;
        i += entity.size();
        decoded = true;
        break;
      }
    }
    if (!decoded) out += s[i++];
  }
  return out;
}

Rendered HtmlReportTest::render(const std::string& page) const {
  const auto which = run_command("command -v chromium");
  if (which.exit_code != 0) {
    ADD_FAILURE() << "chromium is not installed: scripts/setup.sh installs it";
    return {};
  }
  // A profile of its own, so that tests run side by side do not share one.
  const auto r = run_command(
      "chromium --headless --disable-gpu --no-sandbox --user-data-dir=" + path("profile") +
      " --virtual-time-budget=10000 --enable-logging=stderr --v=0 --dump-dom file://" + path(page));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Rendered out;
  out.dom = r.out;
  size_t at = 0;
  while ((at = r.err.find(":CONSOLE", at)) != std::string::npos) {
    out.console.push_back(r.err.substr(at, r.err.find('\n', at) - at));
    ++at;
  }
  for (size_t i = 0;; ++i) {
    const size_t div = out.dom.find("id=\"chart" + std::to_string(i) + "\"");
    if (div == std::string::npos) break;
    const size_t tag_end = out.dom.find('>', div);
    const std::string tag = out.dom.substr(div, tag_end - div);
    const std::string key = "data-values=\"";
    const size_t v = tag.find(key);
    EXPECT_NE(v, std::string::npos) << "chart " << i << " holds no values: " << tag;
    if (v == std::string::npos) break;
    const size_t v_end = tag.find('"', v + key.size());
    out.values.push_back(json::parse(unescape(tag.substr(v + key.size(), v_end - v - key.size()))));
    // The chart drew: an svg inside its element, before the section ends.
    const size_t svg = out.dom.find("<svg", tag_end);
    EXPECT_LT(svg, out.dom.find("</section>", tag_end)) << "chart " << i << " drew no svg";
  }
  return out;
}

// What a page must show of itself whatever it draws: every chart drawn, nothing on the console.
void expect_clean(const Rendered& r, size_t charts) {
  EXPECT_TRUE(r.console.empty()) << r.console.front();
  EXPECT_NE(r.dom.find("data-rendered=\"" + std::to_string(charts) + "\""), std::string::npos);
  EXPECT_EQ(r.dom.find("data-error"), std::string::npos);
  EXPECT_EQ(r.values.size(), charts);
}

// The rows the breakdown must hold, derived here from the JSON by the rule the charts state:
// compute without recomputation, recomputation, each exposed kind, bubble, optimizer, dispatch.
json expected_terms(const json& result) {
  const json& b = result.at("breakdown");
  json rows = json::array();
  auto add = [&](const std::string& term, double s) {
    rows.push_back({{"term", term}, {"seconds", s}});
  };
  add("compute", b.at("compute_s").get<double>() - b.at("recompute_s").get<double>());
  add("recomputation", b.at("recompute_s").get<double>());
  for (const auto& c : b.at("exposed_comm"))
    add("exposed " + c.at("name").get<std::string>(), c.at("seconds").get<double>());
  add("pipeline bubble", b.at("pipeline_bubble_s").get<double>());
  add("optimizer", b.at("optimizer_s").get<double>());
  add("dispatch", b.at("dispatch_s").get<double>());
  return rows;
}

// A timeline of one step: every interval inside the step, none overlapping another of its track,
// and the last one ending when the step does (the des engine's step is its last op's end).
void expect_timeline_of_step(const json& rows, double step_s) {
  ASSERT_FALSE(rows.empty());
  std::map<std::string, double> track_end;
  double last = 0;
  for (const auto& r : rows) {
    const double start = r.at("start_s").get<double>();
    const double end = r.at("end_s").get<double>();
    EXPECT_LE(0, start);
    EXPECT_LE(start, end);
    const std::string track = r.at("track").get<std::string>();
    if (track_end.count(track) != 0) {
      EXPECT_LE(track_end[track], start + 1e-12) << track;
    }
    track_end[track] = end;
    last = std::max(last, end);
  }
  EXPECT_NEAR(last, step_s, 1e-9 * step_s);
}

TEST_F(HtmlReportTest, SimulatePageDrawsTheNumbersOfItsJson) {
  const std::string args =
      "simulate --model llama3-8b --cluster dgx-h100 --nodes 2 --tp 2 --pp 2 --global-batch 32 "
      "--seq 4096 --engine des";
  const json j = run_with_page(args, "sim.html");
  const auto r = render("sim.html");
  expect_clean(r, 3);
  ASSERT_EQ(r.values.size(), 3u);
  EXPECT_EQ(r.values[0], expected_terms(j));
  EXPECT_EQ(r.values[1], j.at("memory"));
  expect_timeline_of_step(r.values[2], j.at("step_time_s").get<double>());
  // Two pipeline stages simulated: both ranks' compute streams are drawn.
  std::set<std::string> tracks;
  for (const auto& row : r.values[2]) tracks.insert(row.at("track").get<std::string>());
  EXPECT_TRUE(tracks.count("rank 0 compute") && tracks.count("rank 8 compute"));
  // Same inputs, same bytes; --json does not change the page.
  ASSERT_EQ(run_command(orrery(args + " --html " + path("again.html"))).exit_code, 0);
  EXPECT_EQ(read_file(path("sim.html")), read_file(path("again.html")));
}

TEST_F(HtmlReportTest, AnalyticSimulatePageSaysWhyItHasNoTimeline) {
  const json j = run_with_page(
      "simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 8 --global-batch 8 --seq 2048",
      "sim.html");
  const auto r = render("sim.html");
  expect_clean(r, 2);
  EXPECT_NE(r.dom.find("No timeline: the analytic engine predicts none"), std::string::npos);
  ASSERT_EQ(r.values.size(), 2u);
  EXPECT_EQ(r.values[0], expected_terms(j));
}

TEST_F(HtmlReportTest, PlanPageDrawsTheRankedPlansAndTheWinner) {
  const json j = run_with_page(
      "plan --model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 32 --seq 4096 --top 3 "
      "--quiet",
      "plan.html");
  const auto r = render("plan.html");
  expect_clean(r, 4);
  ASSERT_EQ(r.values.size(), 4u);
  json bars = json::array();
  for (const auto& p : j.at("plans")) {
    for (auto row : expected_terms(p.at("result"))) {
      row["rank"] = p.at("rank");
      row["plan"] =
          "#" + std::to_string(p.at("rank").get<int>()) + " " + p.at("label").get<std::string>();
      bars.push_back(row);
    }
  }
  EXPECT_EQ(r.values[0], bars);
  const json& best = j.at("plans").at(0).at("result");
  EXPECT_EQ(r.values[1], expected_terms(best));
  EXPECT_EQ(r.values[2], best.at("memory"));
  // The winner simulated again by the des engine that ranked it: the same step.
  expect_timeline_of_step(r.values[3], best.at("step_time_s").get<double>());
}

TEST_F(HtmlReportTest, ValidatePageDrawsEveryCaseAgainstItsMeasurement) {
  const std::string runs = std::string(ORRERY_SOURCE_DIR) + "/validation/data/runs.json";
  const json j = run_with_page("validate --runs " + runs, "runs.html");
  const auto r = render("runs.html");
  expect_clean(r, 1);
  ASSERT_EQ(r.values.size(), 1u);
  EXPECT_EQ(r.values[0], j.at("cases"));
  // The points drawn: one mark per case that ran, skipped ones (null figures) left out.
  size_t ran = 0;
  for (const auto& c : j.at("cases")) ran += c.at("predicted_step_s").is_null() ? 0 : 1;
  size_t marks = 0;
  for (size_t at = 0; (at = r.dom.find("aria-roledescription=\"point\"", at)) != std::string::npos;
       ++at)
    ++marks;
  EXPECT_EQ(marks, ran);
}

TEST_F(HtmlReportTest, CollectivesPageDrawsACurvePerTable) {
  const std::string tables = std::string(ORRERY_SOURCE_DIR) + "/validation/data/collectives.json";
  const json j = run_with_page("validate --collectives " + tables, "coll.html");
  const auto r = render("coll.html");
  expect_clean(r, 1);
  json points = json::array();
  for (const auto& t : j.at("tables")) {
    if (!t.contains("rows")) continue;
    for (const auto& row : t.at("rows"))
      points.push_back(
          {{"table", t.at("id")}, {"bytes", row.at("bytes")}, {"error", row.at("error")}});
  }
  ASSERT_EQ(r.values.size(), 1u);
  EXPECT_EQ(r.values[0], points);
}

TEST_F(HtmlReportTest, GoodputPageDrawsTheFailuresPerComponent) {
  const json j = run_with_page(
      "goodput --model llama3-8b --cluster dgx-h100 --nodes 2 --tp 2 --pp 2 --global-batch 32 "
      "--seq 4096 --trials 50",
      "goodput.html");
  const auto r = render("goodput.html");
  expect_clean(r, 1);
  ASSERT_EQ(r.values.size(), 1u);
  EXPECT_EQ(r.values[0], j.at("failures").at("components"));
}

TEST_F(HtmlReportTest, HoldoutHasNoPageAndSaysSo) {
  const std::string runs = std::string(ORRERY_SOURCE_DIR) + "/validation/data/runs.json";
  const auto r = run_command(
      orrery("validate --runs " + runs + " --holdout-by framework --html " + path("h.html")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--holdout-by excludes --html"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("h.html")));
}

}  // namespace
}  // namespace orrery
