#include "holdout_report.hpp"

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "csv.hpp"
#include "orrery/base/units.hpp"
#include "output.hpp"
#include "table.hpp"
#include "text.hpp"

namespace orrery::cli {
namespace {

std::string factor(double x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

int simulated(const std::vector<validation::RunCase>& cases) {
  int n = 0;
  for (const auto& c : cases) n += c.skipped.empty();
  return n;
}

nlohmann::ordered_json case_json(const validation::RunCase& held,
                                 const validation::RunCase& shipped) {
  // Every key in every case: a skipped case's figures are null and `skipped` says why.
  nlohmann::ordered_json j{{"id", held.id},
                           {"skipped", held.skipped},
                           {"measured_step_s", nullptr},
                           {"predicted_step_s", nullptr},
                           {"error", nullptr},
                           {"shipped_predicted_step_s", nullptr},
                           {"shipped_error", nullptr}};
  if (!held.skipped.empty()) return j;
  j["measured_step_s"] = held.measured_s;
  j["predicted_step_s"] = held.predicted_s;
  j["error"] = held.error;
  j["shipped_predicted_step_s"] = shipped.predicted_s;
  j["shipped_error"] = shipped.error;
  return j;
}

nlohmann::ordered_json unread_json(const validation::RunHoldout& h) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& c : h.unread) out.push_back({{"id", c.id}, {"skipped", c.skipped}});
  return out;
}

void print_json(const validation::RunHoldout& h, const std::string& file,
                const std::string& engine) {
  nlohmann::ordered_json families = nlohmann::ordered_json::array();
  for (const auto& f : h.families) {
    nlohmann::ordered_json cases = nlohmann::ordered_json::array();
    for (size_t i = 0; i < f.cases.size(); ++i)
      cases.push_back(case_json(f.cases[i], f.shipped[i]));
    families.push_back({{"family", f.family},
                        {"simulated", simulated(f.cases)},
                        {"fit_cases", f.fit_cases},
                        {"kernel_scale", f.kernel_scale},
                        {"median_abs_error", f.median_abs_error},
                        {"p90_abs_error", f.p90_abs_error},
                        {"shipped_median_abs_error", f.shipped_median_abs_error},
                        {"shipped_p90_abs_error", f.shipped_p90_abs_error},
                        {"cases", cases}});
  }
  nlohmann::ordered_json j{{"file", file},
                           {"engine", engine},
                           {"holdout_by", validation::to_string(h.key)},
                           {"families", families},
                           {"unread", unread_json(h)},
                           {"simulated", h.simulated},
                           {"skipped", h.skipped},
                           {"median_abs_error", h.median_abs_error},
                           {"p90_abs_error", h.p90_abs_error},
                           {"shipped_median_abs_error", h.shipped_median_abs_error},
                           {"shipped_p90_abs_error", h.shipped_p90_abs_error},
                           {"in_sample_kernel_scale", h.in_sample_scale},
                           {"in_sample_median_abs_error", h.in_sample_median_abs_error},
                           {"in_sample_p90_abs_error", h.in_sample_p90_abs_error}};
  std::cout << with_header("orrery.validate.holdout", j).dump(2) << "\n";
}

}  // namespace

void print_holdout(const validation::RunHoldout& h, const std::string& file,
                   const std::string& engine, bool json) {
  if (json) return print_json(h, file, engine);
  Table families({std::string(validation::to_string(h.key)), "cases", "fitted on", "factor",
                  "held-out median", "p90", "shipped median", "p90"});
  Table cases({"case", std::string(validation::to_string(h.key)), "measured", "held out", "error",
               "shipped error"});
  std::vector<std::pair<std::string, std::string>> skipped;
  for (const auto& f : h.families) {
    families.add_row({f.family, std::to_string(simulated(f.cases)), std::to_string(f.fit_cases),
                      factor(f.kernel_scale), percent(f.median_abs_error), percent(f.p90_abs_error),
                      percent(f.shipped_median_abs_error), percent(f.shipped_p90_abs_error)});
    for (size_t i = 0; i < f.cases.size(); ++i) {
      const auto& c = f.cases[i];
      if (!c.skipped.empty()) {
        skipped.emplace_back(c.id, c.skipped);
        continue;
      }
      cases.add_row({c.id, f.family, base::units::seconds(c.measured_s),
                     base::units::seconds(c.predicted_s), signed_percent(c.error),
                     signed_percent(f.shipped[i].error)});
    }
  }
  for (const auto& c : h.unread) skipped.emplace_back(c.id, c.skipped);
  families.add_row({"all", std::to_string(h.simulated), "", "", percent(h.median_abs_error),
                    percent(h.p90_abs_error), percent(h.shipped_median_abs_error),
                    percent(h.shipped_p90_abs_error)});
  std::cout << "Each family predicted with the GEMM/attention efficiency factor fitted on the "
               "other families\n\n"
            << families.render() << "\n"
            << cases.render() << "\n"
            << render_fields({{"held-out median |error|", percent(h.median_abs_error)},
                              {"held-out p90 |error|", percent(h.p90_abs_error)},
                              {"in-sample factor", factor(h.in_sample_scale) + " (fitted on all " +
                                                       std::to_string(h.simulated) + " cases)"},
                              {"in-sample median |error|", percent(h.in_sample_median_abs_error)},
                              {"in-sample p90 |error|", percent(h.in_sample_p90_abs_error)},
                              {"cases skipped", std::to_string(h.skipped)}});
  if (!skipped.empty()) std::cout << "\nskipped\n" << render_fields(skipped);
}

std::string holdout_csv(const validation::RunHoldout& h) {
  std::string out =
      csv_line({"family", "kernel_scale", "case", "measured_step_s", "predicted_step_s", "error",
                "shipped_predicted_step_s", "shipped_error", "skipped"});
  const auto line = [&out](const std::string& family, const std::string& scale,
                           const validation::RunCase& held, const validation::RunCase* shipped) {
    const bool ran = held.skipped.empty() && shipped != nullptr;
    const auto figure = [ran](double x) { return ran ? csv_number(x) : std::string(); };
    out += csv_line({family, scale, held.id, figure(held.measured_s), figure(held.predicted_s),
                     figure(held.error), figure(ran ? shipped->predicted_s : 0),
                     figure(ran ? shipped->error : 0), held.skipped});
  };
  for (const auto& f : h.families) {
    for (size_t i = 0; i < f.cases.size(); ++i) {
      line(f.family, csv_number(f.kernel_scale), f.cases[i],
           i < f.shipped.size() ? &f.shipped[i] : nullptr);
    }
  }
  for (const auto& c : h.unread) line("", "", c, nullptr);
  return out;
}

}  // namespace orrery::cli
