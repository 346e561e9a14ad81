// The pages `--html FILE` writes (docs/report.md), one per command, each from the JSON object the
// command prints with --json (so the charts and the JSON hold the same numbers).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery::cli {

// `simulate`: where the step goes, memory per rank and, from the des engine, the timeline
// (nullptr: the analytic engine, which predicts none; the page says so).
std::string simulate_page(const nlohmann::ordered_json& result, const std::string& plan_summary,
                          const pb::ExecGraph* timeline);

// `plan`: the ranked plans and the winner's breakdown, memory and (when the des engine ranked
// the plans: `winner_timeline`) timeline.
std::string plan_page(const nlohmann::ordered_json& plans, const pb::ExecGraph* winner_timeline);

// `validate --runs`: predicted against measured step time per case.
std::string validate_runs_page(const nlohmann::ordered_json& validation);

// `validate --collectives`: the error per message size, a curve per table.
std::string validate_collectives_page(const nlohmann::ordered_json& validation);

// `goodput`: the failures per component (per day) and the run's figures.
std::string goodput_page(const nlohmann::ordered_json& goodput);

}  // namespace orrery::cli
