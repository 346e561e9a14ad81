#include "run_trace.hpp"

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "orrery/base/error.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/base/units.hpp"
#include "orrery/executor/results.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/sim_output.hpp"
#include "orrery/traces/perfetto.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::cli {
namespace {

pb::ExecGraph lower_ranks(const LoadedJob& job, std::vector<int64_t> ranks) {
  const plan::ResolvedPlan plan =
      plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where);
  plan::LowerOptions options;
  options.ranks = std::move(ranks);
  return plan::lower(plan, options);
}

}  // namespace

pb::RankGraph predicted_rank_graph(const LoadedJob& job, int64_t rank) {
  return lower_ranks(job, {rank}).ranks(0);
}

pb::ExecGraph merge_run_trace(const LoadedJob& job, const std::string& dir, int64_t first_step,
                              int64_t steps) {
  pb::ExecGraph g = lower_ranks(job, {0});  // the header: names, world size, process groups
  g.clear_ranks();
  g.set_producer("orrery executor (libtorch, gloo)");
  g.set_device(job.cluster.node_types_size() > 0 ? job.cluster.node_types(0).device() : "");
  *g.mutable_plan() = job.plan;
  *g.mutable_model_spec() = job.model;
  *g.mutable_cluster_spec() = job.cluster;
  std::vector<std::string> rank_files;
  for (int64_t r = 0; r < g.world_size(); ++r) {
    rank_files.push_back(executor::trace_rank_file(dir, r));
    read_spec_file(rank_files.back(), g.add_ranks());
  }
  std::vector<double> measured;  // the steps the nodes' timings describe: all but the first
  for (int64_t s = first_step; s <= steps; ++s) {
    const double seconds = executor::read_step_result(executor::step_file(dir, s)).seconds;
    g.add_step_seconds(seconds);
    if (steps == first_step || s > first_step) measured.push_back(seconds);
  }
  g.set_steps(static_cast<int64_t>(measured.size()));
  g.set_measured_step_s(
      base::clipped_mean(measured));  // as the nodes' timings (measured_trace.cpp)
  const auto trace = std::filesystem::path(dir) / "trace.json";
  const auto timeline = std::filesystem::path(dir) / "timeline.json";
  write_file_atomically(trace, to_json(g), true);
  write_file_atomically(timeline, to_perfetto_json({{&g, "measured"}}), true);
  for (const auto& f : rank_files) std::filesystem::remove(f);
  return g;
}

std::string throughput_line(const LoadedJob& job, const pb::ExecGraph& trace, int64_t first_step) {
  const plan::ResolvedPlan plan =
      plan::resolve_plan(job.plan, job.model, job.cluster, job.plan_where);
  pb::SimResult r;
  r.set_step_time_s(trace.measured_step_s());
  sim::fill_throughput(plan, 0, r);
  const int64_t last = first_step + trace.step_seconds_size() - 1;
  const std::string which =
      last > first_step ? "steps " + std::to_string(first_step + 1) + ".." + std::to_string(last)
                        : "step " + std::to_string(first_step) + ", which includes warm-up";
  std::ostringstream mfu;
  mfu << std::fixed << std::setprecision(1) << 100 * r.mfu();
  return "mean step " + base::units::seconds(r.step_time_s()) + " (" + which + "), " +
         base::units::number(std::round(r.tokens_per_s())) + " tokens/s, MFU " + mfu.str() +
         "% of the cluster's " + plan.precision.dtype + " peak";
}

}  // namespace orrery::cli
