// Planner benchmark: plan quality and search time. A plain program (not Google Benchmark: the
// quantity of interest is the plan found, not a loop's time); prints Markdown tables.
//   orrery_planner_bench [--runs FILE] [--threads N] [--no-exhaustive]
// 1. Every published run of FILE (default ../shared/validation/public_runs.json, next to the
//    repository): the same model, cluster, global batch, sequence length, precision and attention
//    kernel, planned with `orrery plan`'s defaults; the published plan's simulated step time
//    against the planner's best (analytic engine), and the planner's wall time.
// 2. Three spaces small enough to enumerate: the search's best against the exhaustive optimum.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/planner/explain.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/validation/run_validation.hpp"
#include "plan_label.hpp"

namespace orrery {
namespace {

struct Args {
  std::string runs = std::string(ORRERY_SOURCE_DIR) + "/../shared/validation/public_runs.json";
  int threads = 2;
  bool exhaustive = true;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--runs" && i + 1 < argc) {
      a.runs = argv[++i];
    } else if (flag == "--threads" && i + 1 < argc) {
      a.threads = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--no-exhaustive") {
      a.exhaustive = false;
    } else {
      throw base::InputError("", 0, flag, "expected --runs FILE, --threads N or --no-exhaustive");
    }
  }
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "tp8 pp4 dp32 vp3 mbs1 zero1 full": the published plan in the planner's vocabulary.
std::string label(const pb::Plan& p) {
  std::string s = bench::degrees_label(p);
  if (p.parallel().sequence_parallel()) s += " sp";
  s += " mbs" + std::to_string(p.micro_batch_size());
  const char* sharding[] = {"", "", "zero1", "zero2", "zero3", "fsdp", "hsdp"};
  if (p.sharding() > pb::SHARDING_NONE && p.sharding() <= pb::SHARDING_HSDP)
    s += std::string(" ") + sharding[p.sharding()];
  s += p.recompute() == pb::RECOMPUTE_FULL        ? " full"
       : p.recompute() == pb::RECOMPUTE_SELECTIVE ? " selective"
                                                  : "";
  return s;
}

// The planner's label without the layer split and placement details.
std::string short_label(const planner::RankedPlan& p) {
  const std::string full = planner::plan_label(p);
  return full.substr(0, full.find(','));
}

struct Published {
  double step_s = 0;
  std::string note;  // "OOM" or the rule it breaks, when not timed
};

Published simulate_published(const validation::PublishedRun& run, const sim::CostModels& costs) {
  Published out;
  try {
    const plan::ResolvedPlan resolved = plan::resolve_plan(run.plan, run.model, run.cluster);
    for (const auto& m : sim::memory_per_stage(resolved)) {
      if (m.peak_bytes() > m.capacity_bytes()) out.note = "OOM in the memory model";
    }
    out.step_s = sim::simulate_analytic(resolved, costs).result.step_time_s();
  } catch (const base::InputError& e) {
    out.note = std::string("rejected: ") + e.what();
  }
  return out;
}

// Cases where the default space loses to the published plan, planned again with the space
// widened to the published virtual stages and micro-batch (printed after the table).
struct Widened {
  std::string id, best;
  double published_s = 0, best_s = 0, wall_s = 0;
};

void public_runs(const Args& a) {
  std::vector<Widened> widened;
  std::printf(
      "| case | GPUs | published plan | published step | planner's best plan | planner step | "
      "ratio | plan time | timed |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const validation::PublishedRun& run : validation::published_runs(a.runs)) {
    if (!run.skipped.empty()) {
      std::printf("| %s | | skipped: %s | | | | | | |\n", run.id.c_str(), run.skipped.c_str());
      continue;
    }
    planner::PlanningJob job{run.model, run.cluster, {}};
    job.base.set_model(run.plan.model());
    job.base.set_cluster(run.plan.cluster());
    job.base.set_nodes(run.plan.nodes());
    *job.base.mutable_job() = run.plan.job();
    job.base.set_attention_kernel(run.plan.attention_kernel());
    const topologies::Topology topology(run.cluster);
    const sim::CostModels costs(topology, planner::precision_dtype(run.plan.job().precision()));
    const Published published = simulate_published(run, costs);
    const planner::PlanSpace space(job, {});
    const planner::AnalyticEngine engine(costs);
    const planner::SpaceOptions defaults;
    planner::SearchOptions o;
    o.threads = a.threads;
    o.top_k = 1;
    const auto start = std::chrono::steady_clock::now();
    const planner::SearchResult r = planner::search(space, engine, o);
    const double wall = seconds_since(start);
    const std::string best = r.ranked.empty() ? "nothing fits" : short_label(r.ranked.front());
    const double best_s = r.ranked.empty() ? 0 : r.ranked.front().eval.step_time_s();
    char ratio[32] = "-";
    if (published.step_s > 0 && best_s > 0)
      std::snprintf(ratio, sizeof ratio, "%.3f", best_s / published.step_s);
    std::printf("| %s | %lld | %s%s%s | %.3f s | %s | %.3f s | %s | %.2f s | %lld |\n",
                run.id.c_str(), static_cast<long long>(topologies::total_devices(run.cluster)),
                label(run.plan).c_str(), published.note.empty() ? "" : "; ", published.note.c_str(),
                published.step_s, best.c_str(), best_s, ratio, wall,
                static_cast<long long>(r.stats.timed));
    std::fflush(stdout);
    if (best_s > published.step_s && published.step_s > 0) {
      planner::SpaceOptions wide;
      wide.max_vp = std::max<int64_t>(defaults.max_vp, run.plan.parallel().vp());
      wide.max_micro_batch =
          std::max<int64_t>(defaults.max_micro_batch, run.plan.micro_batch_size());
      const planner::PlanSpace wide_space(job, wide);
      const auto again = std::chrono::steady_clock::now();
      const planner::SearchResult w = planner::search(wide_space, engine, o);
      if (!w.ranked.empty()) {
        widened.push_back({run.id, short_label(w.ranked.front()), published.step_s,
                           w.ranked.front().eval.step_time_s(), seconds_since(again)});
      }
    }
  }
  for (const auto& w : widened) {
    std::printf(
        "\n%s with max_vp and max_micro_batch widened to the published plan's: %s, %.3f s (ratio "
        "%.3f, %.2f s)\n",
        w.id.c_str(), w.best.c_str(), w.best_s, w.best_s / w.published_s, w.wall_s);
  }
}

struct EnumerableCase {
  const char* model;
  int64_t nodes, global_batch, seq;
};

void exhaustive_gaps(const Args& a) {
  const EnumerableCase cases[] = {
      {"llama3-8b", 4, 256, 8192}, {"llama3-70b", 8, 512, 8192}, {"mixtral-8x7b", 8, 256, 4096}};
  std::printf("\n| space | points | exhaustive: best, time | search: best, time, timed | gap |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const auto& c : cases) {
    planner::PlanningJob job;
    job.model = models::load_model(c.model);
    job.cluster = topologies::load_cluster("dgx-h100", c.nodes);
    job.base.set_model(c.model);
    job.base.set_cluster("dgx-h100");
    job.base.set_nodes(c.nodes);
    job.base.mutable_job()->set_global_batch_size(c.global_batch);
    job.base.mutable_job()->set_seq_len(c.seq);
    job.base.mutable_job()->set_precision(pb::PRECISION_BF16);
    const topologies::Topology topology(job.cluster);
    const sim::CostModels costs(topology, "bf16");
    const planner::AnalyticEngine engine(costs);
    const planner::PlanSpace space(job, {});
    planner::SearchOptions exhaustive;
    exhaustive.threads = a.threads;
    exhaustive.top_k = 1;
    exhaustive.force_exhaustive = true;
    planner::SearchOptions searched = exhaustive;
    searched.force_exhaustive = false;
    searched.exhaustive_limit = 0;
    const auto e = planner::search(space, engine, exhaustive);
    const auto s = planner::search(space, engine, searched);
    if (e.ranked.empty() || s.ranked.empty()) {
      std::printf("| %s x%lld | nothing fits | | | |\n", c.model, static_cast<long long>(c.nodes));
      continue;
    }
    const double best_e = e.ranked.front().eval.step_time_s(),
                 best_s = s.ranked.front().eval.step_time_s();
    std::printf(
        "| %s, dgx-h100 x%lld, GBS %lld, seq %lld | %lld | %s %.4f s, %.1f s | %s %.4f s, %.1f s, "
        "%lld | %+.2f%% |\n",
        c.model, static_cast<long long>(c.nodes), static_cast<long long>(c.global_batch),
        static_cast<long long>(c.seq), static_cast<long long>(e.stats.space_size),
        short_label(e.ranked.front()).c_str(), best_e, e.stats.seconds,
        short_label(s.ranked.front()).c_str(), best_s, s.stats.seconds,
        static_cast<long long>(s.stats.timed), 100 * (best_s / best_e - 1));
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace orrery

int main(int argc, char** argv) {
  try {
    const orrery::Args a = orrery::parse(argc, argv);
    orrery::public_runs(a);
    if (a.exhaustive) orrery::exhaustive_gaps(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orrery_planner_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
