#include "report_pages.hpp"

#include <cmath>

#include "html_page.hpp"
#include "orrery/base/units.hpp"
#include "report_charts.hpp"
#include "text.hpp"

namespace orrery::cli {
namespace {

using nlohmann::ordered_json;

// "step 1.23 s, 45,678 tokens/s, MFU 41.2% (engine des)" from a SimResult's JSON.
std::string headline(const ordered_json& r) {
  return "step " + base::units::seconds(r.at("step_time_s").get<double>()) + ", " +
         base::units::number(std::round(r.at("tokens_per_s").get<double>())) + " tokens/s, MFU " +
         percent(r.at("mfu").get<double>()) + " (engine " + r.at("engine").get<std::string>() + ")";
}

// The charts of one simulated step.
void add_step_charts(HtmlPage& page, const ordered_json& result, const pb::ExecGraph* timeline,
                     const std::string& no_timeline) {
  for (const auto& m : result.at("memory")) {
    if (!m.at("oom").get<bool>()) continue;
    page.add_note("OUT OF MEMORY: rank " + std::to_string(m.at("rank").get<int64_t>()) +
                  " peaks at " + base::units::bytes(m.at("peak_bytes").get<double>()) + " of " +
                  base::units::bytes(m.at("capacity_bytes").get<double>()) +
                  "; the figures assume it fit.");
  }
  page.add_chart("Where the step goes", breakdown_chart(result));
  page.add_chart("Memory per rank against its device's capacity (red)", memory_chart(result));
  if (timeline != nullptr) {
    page.add_chart("One step, per simulated rank and stream (des engine)",
                   timeline_chart(timeline_rows(*timeline)));
  } else {
    page.add_note(no_timeline);
  }
}

}  // namespace

std::string simulate_page(const ordered_json& result, const std::string& plan_summary,
                          const pb::ExecGraph* timeline) {
  HtmlPage page("orrery simulate: " + result.at("model").get<std::string>() + " on " +
                result.at("cluster").get<std::string>());
  page.add_note(plan_summary);
  page.add_note(headline(result));
  add_step_charts(page, result, timeline,
                  "No timeline: the analytic engine predicts none (--engine des draws one).");
  return page.render();
}

std::string plan_page(const ordered_json& plans, const pb::ExecGraph* winner_timeline) {
  HtmlPage page("orrery plan: " + plans.at("model").get<std::string>() + " on " +
                plans.at("cluster").get<std::string>() + ", " +
                std::to_string(plans.at("devices").get<int64_t>()) + " devices");
  const auto& ranked = plans.at("plans");
  const auto& best = ranked.at(0);
  page.add_note("#1 " + best.at("label").get<std::string>() + ": " + headline(best.at("result")));
  if (!plans.at("why_best").is_null()) page.add_note(plans.at("why_best").get<std::string>());
  page.add_chart("Ranked plans: step time and where it goes", plans_chart(ranked));
  add_step_charts(page, best.at("result"), winner_timeline,
                  "No timeline: the plans were ranked by the analytic engine alone, which "
                  "predicts none (--rerank des draws the winner's).");
  return page.render();
}

std::string validate_runs_page(const ordered_json& v) {
  HtmlPage page("orrery validate: " + v.at("file").get<std::string>());
  page.add_note(std::to_string(v.at("simulated").get<int64_t>()) + " cases simulated, " +
                std::to_string(v.at("skipped").get<int64_t>()) + " skipped (engine " +
                v.at("engine").get<std::string>() + "); median |error| " +
                percent(v.at("median_abs_error").get<double>()) + ", p90 " +
                percent(v.at("p90_abs_error").get<double>()));
  page.add_chart("Predicted against measured step time (dashed: y = x)",
                 validation_chart(v.at("cases")));
  return page.render();
}

std::string validate_collectives_page(const ordered_json& v) {
  HtmlPage page("orrery validate: " + v.at("file").get<std::string>());
  page.add_note(std::to_string(v.at("rows").get<int64_t>()) + " rows compared; median |error| " +
                percent(v.at("median_abs_error").get<double>()) + ", p90 " +
                percent(v.at("p90_abs_error").get<double>()));
  ordered_json points = ordered_json::array();
  for (const auto& t : v.at("tables")) {
    for (const auto& r : t.at("rows")) {
      points.push_back({{"table", t.at("id")}, {"bytes", r.at("bytes")}, {"error", r.at("error")}});
    }
  }
  page.add_chart("Error of the predicted time by message size, per table",
                 curves_chart(points, {.x_field = "bytes",
                                       .x_title = "message size (bytes)",
                                       .y_field = "error",
                                       .y_title = "relative error of the prediction",
                                       .series_field = "table",
                                       .log_x = true}));
  return page.render();
}

std::string goodput_page(const ordered_json& g) {
  HtmlPage page("orrery goodput: " + g.at("model").get<std::string>() + " on " +
                g.at("cluster").get<std::string>());
  const auto& interval = g.at("interval");
  const auto& mc = g.at("monte_carlo");
  page.add_note("step " + base::units::seconds(g.at("step_s").get<double>()) +
                "; checkpoint every " + std::to_string(interval.at("steps").get<int64_t>()) +
                " steps (" + base::units::seconds(interval.at("interval_s").get<double>()) +
                "), goodput " + percent(interval.at("goodput").get<double>()));
  page.add_note("Monte Carlo, " + std::to_string(mc.at("trials").get<int64_t>()) +
                " runs: goodput " + percent(mc.at("goodput").get<double>()) +
                ", wall time to the target p10 / p50 / p90 " +
                base::units::seconds(mc.at("wall_p10_s").get<double>()) + " / " +
                base::units::seconds(mc.at("wall_p50_s").get<double>()) + " / " +
                base::units::seconds(mc.at("wall_p90_s").get<double>()));
  page.add_chart("Expected failures per day, by component",
                 failures_chart(g.at("failures").at("components")));
  return page.render();
}

}  // namespace orrery::cli
