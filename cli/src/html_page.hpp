// One self-contained HTML page of Vega-Lite charts, the page `--html FILE` writes (plan,
// simulate, validate --runs; docs/report.md). Vega, Vega-Lite and vega-embed
// (third_party/vega, compiled into the binary) are inlined, so the page opens offline and the
// same inputs give the same bytes. Each chart's spec carries its data as the named dataset
// "table", built from the JSON the command prints with --json; once drawn, the page copies what
// the view holds of "table" into the chart's data-values attribute, so a script (and
// tests/cli/html_report_test.sh, in a headless browser) reads the numbers the chart drew.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace orrery::cli {

class HtmlPage {
 public:
  explicit HtmlPage(std::string title) : title_(std::move(title)) {}

  // A paragraph under the title (what the page shows, what it leaves out and why).
  void add_note(std::string text);
  // A chart: `spec` is a Vega-Lite spec whose data is {"name": "table"} with
  // datasets.table (see report_charts.hpp). Charts appear in the order added; a later command
  // (sweep) adds its curves the same way.
  void add_chart(std::string title, nlohmann::ordered_json spec);

  std::string render() const;

 private:
  struct Chart {
    std::string title;
    nlohmann::ordered_json spec;
  };
  std::string title_;
  std::vector<std::string> notes_;
  std::vector<Chart> charts_;
};

}  // namespace orrery::cli
