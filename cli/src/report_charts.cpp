#include "report_charts.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "orrery/traces/spec_io.hpp"

namespace orrery::cli {
namespace {

constexpr int kWidth = 900;
constexpr int kRowHeight = 22;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Ops on one track closer than this are drawn as one interval: the Perfetto export's
// resolution, far below a pixel of any step.
constexpr double kTouchS = 1e-9;

ordered_json spec_with_table(ordered_json table) {
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"width", kWidth},
          {"data", {{"name", "table"}}},
          {"datasets", {{"table", std::move(table)}}}};
}

ordered_json field(const char* name, const char* type, const char* title) {
  return {{"field", name}, {"type", type}, {"title", title}};
}

ordered_json tooltip(std::initializer_list<ordered_json> fields) { return ordered_json(fields); }

}  // namespace

ordered_json step_term_rows(const ordered_json& result) {
  const auto& b = result.at("breakdown");
  ordered_json rows = ordered_json::array();
  auto add = [&](const std::string& term, double seconds) {
    rows.push_back({{"term", term}, {"seconds", seconds}});
  };
  add("compute", b.at("compute_s").get<double>() - b.at("recompute_s").get<double>());
  add("recomputation", b.at("recompute_s").get<double>());
  for (const auto& c : b.at("exposed_comm")) {
    add("exposed " + c.at("name").get<std::string>(), c.at("seconds").get<double>());
  }
  add("pipeline bubble", b.at("pipeline_bubble_s").get<double>());
  add("optimizer", b.at("optimizer_s").get<double>());
  add("dispatch", b.at("dispatch_s").get<double>());
  return rows;
}

ordered_json breakdown_chart(const ordered_json& result) {
  ordered_json spec = spec_with_table(step_term_rows(result));
  spec["transform"] = {
      {{"joinaggregate", {{{"op", "sum"}, {"field", "seconds"}, {"as", "step_s"}}}}},
      {{"calculate", "datum.seconds / datum.step_s"}, {"as", "share"}}};
  spec["mark"] = "bar";
  spec["encoding"] = {
      {"y", {{"field", "term"}, {"type", "nominal"}, {"sort", nullptr}, {"title", nullptr}}},
      {"x", field("seconds", "quantitative", "seconds")},
      {"color", {{"field", "term"}, {"type", "nominal"}, {"legend", nullptr}}},
      {"tooltip", tooltip({field("term", "nominal", "term"),
                           field("seconds", "quantitative", "s"),
                           {{"field", "share"}, {"type", "quantitative"}, {"format", ".1%"}}})}};
  return spec;
}

ordered_json memory_chart(const ordered_json& result) {
  ordered_json spec = spec_with_table(result.at("memory"));
  spec["transform"] = {{{"calculate", "'rank ' + datum.rank"}, {"as", "where"}}};
  // The parts stacked in this order (and so named in the legend): the fields without "_bytes".
  const ordered_json fields = {"parameters_bytes",   "gradients_bytes",
                               "optimizer_bytes",    "activations_bytes",
                               "comm_buffers_bytes", "allocator_overhead_bytes"};
  const ordered_json parts = {"parameters",  "gradients",    "optimizer",
                              "activations", "comm_buffers", "allocator_overhead"};
  const ordered_json y = {
      {"field", "where"}, {"type", "nominal"}, {"sort", nullptr}, {"title", nullptr}};
  ordered_json bars = {
      {"transform",
       {{{"fold", fields}, {"as", {"field", "bytes"}}},
        {{"calculate", "replace(datum.field, '_bytes', '')"}, {"as", "part"}},
        {{"calculate", "indexof(" + parts.dump() + ", datum.part)"}, {"as", "part_index"}},
        {{"calculate", "datum.bytes / " + std::to_string(kGiB)}, {"as", "GiB"}}}},
      {"mark", "bar"},
      {"encoding",
       {{"y", y},
        {"x", {{"field", "GiB"}, {"type", "quantitative"}, {"stack", "zero"}, {"title", "GiB"}}},
        {"color", {{"field", "part"}, {"type", "nominal"}, {"sort", parts}, {"title", nullptr}}},
        {"order", {{"field", "part_index"}, {"type", "quantitative"}}},
        {"tooltip", tooltip({field("where", "nominal", "rank"),
                             field("part", "nominal", "part"),
                             {{"field", "GiB"}, {"type", "quantitative"}, {"format", ".2f"}}})}}}};
  ordered_json capacity = {
      {"transform",
       {{{"calculate", "datum.capacity_bytes / " + std::to_string(kGiB)}, {"as", "capacity_GiB"}}}},
      {"mark", {{"type", "tick"}, {"thickness", 3}, {"color", "#b00"}}},
      {"encoding",
       {{"y", y},
        {"x", {{"field", "capacity_GiB"}, {"type", "quantitative"}}},
        {"tooltip", tooltip({field("capacity_GiB", "quantitative", "capacity (GiB)"),
                             field("oom", "nominal", "out of memory")})}}}};
  spec["layer"] = {bars, capacity};
  return spec;
}

ordered_json plans_chart(const ordered_json& plans) {
  ordered_json rows = ordered_json::array();
  for (const auto& p : plans) {
    const std::string name =
        "#" + std::to_string(p.at("rank").get<int64_t>()) + " " + p.at("label").get<std::string>();
    for (auto row : step_term_rows(p.at("result"))) {
      row["rank"] = p.at("rank");
      row["plan"] = name;
      rows.push_back(std::move(row));
    }
  }
  ordered_json spec = spec_with_table(std::move(rows));
  spec["mark"] = "bar";
  spec["encoding"] = {
      {"y",
       {{"field", "plan"},
        {"type", "nominal"},
        {"sort", nullptr},
        {"title", nullptr},
        {"axis", {{"labelLimit", 600}}}}},
      {"x",
       {{"field", "seconds"},
        {"type", "quantitative"},
        {"stack", "zero"},
        {"title", "step time (s)"}}},
      {"color",
       {{"field", "term"},
        {"type", "nominal"},
        {"title", nullptr},
        {"legend", {{"orient", "bottom"}, {"columns", 4}}}}},
      {"tooltip", tooltip({field("plan", "nominal", "plan"), field("term", "nominal", "term"),
                           field("seconds", "quantitative", "s")})}};
  return spec;
}

namespace {

struct Span {
  std::string activity;
  int64_t micro_batch, stage;
  double start_s, end_s;
};

// One stream's timed ops as intervals, consecutive ops of one activity, micro-batch and stage
// that touch merged.
std::vector<Span> stream_spans(const pb::RankGraph& rank, int stream) {
  const bool compute = rank.streams(stream) == "compute";
  std::vector<const pb::ExecNode*> nodes;
  for (const auto& n : rank.nodes()) {
    if (n.stream() == stream && n.has_start_s() && n.has_duration_s()) nodes.push_back(&n);
  }
  std::sort(nodes.begin(), nodes.end(), [](const auto* a, const auto* b) {
    return std::make_pair(a->start_s(), a->id()) < std::make_pair(b->start_s(), b->id());
  });
  std::vector<Span> spans;
  for (const auto* n : nodes) {
    const std::string activity =
        compute ? enum_value_name(*pb::Phase_descriptor()->FindValueByNumber(n->phase()))
                : "communication";
    const double end = n->start_s() + n->duration_s();
    if (!spans.empty()) {
      Span& last = spans.back();
      if (last.activity == activity && last.micro_batch == n->micro_batch() &&
          last.stage == n->stage() && n->start_s() <= last.end_s + kTouchS) {
        last.end_s = std::max(last.end_s, end);
        continue;
      }
    }
    spans.push_back({activity, n->micro_batch(), n->stage(), n->start_s(), end});
  }
  return spans;
}

}  // namespace

ordered_json timeline_rows(const pb::ExecGraph& timeline) {
  ordered_json rows = ordered_json::array();
  for (const auto& rank : timeline.ranks()) {
    for (int s = 0; s < rank.streams_size(); ++s) {
      const std::string track = "rank " + std::to_string(rank.rank()) + " " + rank.streams(s);
      for (const auto& span : stream_spans(rank, s)) {
        rows.push_back({{"track", track},
                        {"rank", rank.rank()},
                        {"stream", rank.streams(s)},
                        {"activity", span.activity},
                        {"micro_batch", span.micro_batch},
                        {"start_s", span.start_s},
                        {"end_s", span.end_s}});
      }
    }
  }
  return rows;
}

ordered_json timeline_chart(const ordered_json& rows) {
  std::vector<std::string> tracks;
  for (const auto& r : rows) {
    const auto& t = r.at("track").get_ref<const std::string&>();
    if (std::find(tracks.begin(), tracks.end(), t) == tracks.end()) tracks.push_back(t);
  }
  ordered_json spec = spec_with_table(rows);
  spec["height"] = kRowHeight * static_cast<int>(std::max<size_t>(tracks.size(), 1));
  spec["mark"] = "bar";
  spec["encoding"] = {
      {"y", {{"field", "track"}, {"type", "nominal"}, {"sort", tracks}, {"title", nullptr}}},
      {"x", field("start_s", "quantitative", "time in the step (s)")},
      {"x2", {{"field", "end_s"}}},
      {"color", {{"field", "activity"}, {"type", "nominal"}, {"title", nullptr}}},
      {"tooltip",
       tooltip({field("track", "nominal", "track"), field("activity", "nominal", "activity"),
                field("micro_batch", "quantitative", "micro-batch"),
                field("start_s", "quantitative", "start (s)"),
                field("end_s", "quantitative", "end (s)")})}};
  return spec;
}

ordered_json validation_chart(const ordered_json& cases) {
  ordered_json spec = spec_with_table(cases);
  spec["height"] = 500;
  spec["width"] = 500;
  const ordered_json valid = {
      {"filter", "isValid(datum.measured_step_s) && isValid(datum.predicted_step_s)"}};
  const auto axis = [](const char* name, const char* title) {
    return ordered_json{
        {"field", name}, {"type", "quantitative"}, {"title", title}, {"scale", {{"type", "log"}}}};
  };
  ordered_json points = {
      {"transform", {valid}},
      {"mark", {{"type", "point"}, {"filled", true}}},
      {"encoding",
       {{"x", axis("measured_step_s", "measured step (s)")},
        {"y", axis("predicted_step_s", "predicted step (s)")},
        {"tooltip",
         tooltip({field("id", "nominal", "case"),
                  field("plan", "nominal", "plan"),
                  field("measured_step_s", "quantitative", "measured (s)"),
                  field("predicted_step_s", "quantitative", "predicted (s)"),
                  {{"field", "error"}, {"type", "quantitative"}, {"format", "+.1%"}}})}}}};
  // y = x from the smallest to the largest step either way, computed from the same table.
  ordered_json diagonal = {
      {"transform",
       {valid,
        {{"fold", {"measured_step_s", "predicted_step_s"}}, {"as", {"which", "s"}}},
        {{"aggregate",
          {{{"op", "min"}, {"field", "s"}, {"as", "lo"}},
           {{"op", "max"}, {"field", "s"}, {"as", "hi"}}}}},
        {{"fold", {"lo", "hi"}}, {"as", {"end", "s"}}}}},
      {"mark", {{"type", "line"}, {"color", "#888"}, {"strokeDash", {4, 4}}}},
      {"encoding",
       {{"x", {{"field", "s"}, {"type", "quantitative"}, {"title", "measured step (s)"}}},
        {"y", {{"field", "s"}, {"type", "quantitative"}, {"title", "predicted step (s)"}}}}}};
  spec["layer"] = {diagonal, points};
  return spec;
}

ordered_json failures_chart(const ordered_json& components) {
  ordered_json spec = spec_with_table(components);
  spec["transform"] = {{{"calculate", "datum.rate_per_s * 86400"}, {"as", "per_day"}}};
  spec["mark"] = "bar";
  spec["encoding"] = {
      {"y", {{"field", "component"}, {"type", "nominal"}, {"sort", "-x"}, {"title", nullptr}}},
      {"x", field("per_day", "quantitative", "failures per day")},
      {"tooltip",
       tooltip({field("component", "nominal", "component"), field("count", "quantitative", "count"),
                field("mtbf_s", "quantitative", "MTBF of one (s)"),
                field("per_day", "quantitative", "failures per day")})}};
  return spec;
}

ordered_json curves_chart(const ordered_json& points, const CurveAxes& axes) {
  ordered_json spec = spec_with_table(points);
  spec["height"] = 400;
  auto axis = [](const std::string& name, const std::string& title, bool log) {
    ordered_json a = {{"field", name}, {"type", "quantitative"}, {"title", title}};
    if (log) a["scale"] = {{"type", "log"}};
    return a;
  };
  spec["mark"] = {{"type", "line"}, {"point", true}};
  spec["encoding"] = {
      {"x", axis(axes.x_field, axes.x_title, axes.log_x)},
      {"y", axis(axes.y_field, axes.y_title, axes.log_y)},
      {"color", {{"field", axes.series_field}, {"type", "nominal"}, {"title", nullptr}}},
      {"tooltip", ordered_json::array({{{"field", axes.series_field}, {"type", "nominal"}},
                                       {{"field", axes.x_field}, {"type", "quantitative"}},
                                       {{"field", axes.y_field}, {"type", "quantitative"}}})}};
  return spec;
}

}  // namespace orrery::cli
