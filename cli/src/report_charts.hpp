// The Vega-Lite specs of the `--html` pages (html_page.hpp), each built from the JSON its command
// prints with --json, so that a chart holds the numbers of the JSON: the dataset "table" of each
// spec is that JSON's array, or rows derived from it by the arithmetic stated below.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery::cli {

using nlohmann::ordered_json;

// The terms a step's time adds up to, from a SimResult's JSON (every field present), as rows
// {"term", "seconds"}: compute without recomputation (compute_s - recompute_s), recomputation
// (recompute_s), "exposed <kind>" per exposed_comm entry, pipeline bubble, optimizer, dispatch.
ordered_json step_term_rows(const ordered_json& result);

// Where the step goes: a bar per term (step_term_rows).
ordered_json breakdown_chart(const ordered_json& result);

// Memory per rank: the result's `memory` array as the table, its parts stacked and each rank's
// device capacity as a rule (red past it).
ordered_json memory_chart(const ordered_json& result);

// `orrery plan --json`'s `plans`: a stacked bar per plan, its step_term_rows with the plan's
// rank and label on each row.
ordered_json plans_chart(const ordered_json& plans);

// A simulated step's timeline (the des engine's graphs) as rows {"track", "rank", "stream",
// "activity", "micro_batch", "start_s", "end_s"}: per rank and stream, consecutive ops of one
// activity (forward, backward, recompute, optimizer; "communication" off the compute stream),
// micro-batch and stage that touch (within 1 ns, the Perfetto export's resolution) are one
// interval, so a pipeline pass is one bar.
ordered_json timeline_rows(const pb::ExecGraph& timeline);
ordered_json timeline_chart(const ordered_json& rows);

// `validate --runs --json`'s `cases` as the table: predicted against measured step time, the
// skipped cases (null figures) left out, with the line y = x.
ordered_json validation_chart(const ordered_json& cases);

// `goodput --json`'s failures.components as the table: a bar per component, its rate_per_s
// times 86,400 (failures per day).
ordered_json failures_chart(const ordered_json& components);

// Curves: `y_field` against `x_field`, one line per value of `series_field`, with the points
// as the table (log scales when `log_x` / `log_y`). validate --collectives draws its tables
// with it; `orrery sweep` is meant to draw its points the same way.
struct CurveAxes {
  std::string x_field, x_title, y_field, y_title, series_field;
  bool log_x = false, log_y = false;
};
ordered_json curves_chart(const ordered_json& points, const CurveAxes& axes);

}  // namespace orrery::cli
