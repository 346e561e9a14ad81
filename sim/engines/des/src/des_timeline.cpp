// SimResult from the simulated timeline (make_result, des_internal.hpp). The breakdown follows
// the critical rank, the simulated rank that finishes last: every instant of its step is
// compute (recompute included), optimizer, communication with no compute running (attributed
// to the first of tp, ep, cp, pp, dp that is active), or idle (pipeline bubble and waiting), so
// the terms add up to the step time.
#include <algorithm>
#include <array>

#include "des_internal.hpp"
#include "orrery/sim/memory_model.hpp"

namespace orrery::sim::des {
namespace {

enum Class { kCompute, kRecompute, kOptimizer, kTp, kEp, kCp, kPp, kDp, kClasses };
constexpr std::array<const char*, 5> kCommNames{"tp", "ep", "cp", "pp", "dp"};

Class comm_class(const std::string& dim) {
  if (dim == "tp") return kTp;
  if (dim == "ep" || dim == "etp") return kEp;  // etp: the folded experts' TP collectives
  if (dim == "cp") return kCp;
  if (dim == "pp") return kPp;
  return kDp;
}

Class class_of(const Model& m, size_t rank, const pb::ExecNode& n) {
  if (n.kind() == pb::NODE_KIND_COMPUTE) {
    if (n.phase() == pb::PHASE_OPTIMIZER) return kOptimizer;
    return n.phase() == pb::PHASE_RECOMPUTE ? kRecompute : kCompute;
  }
  const int32_t site = m.site_of_node[rank][static_cast<size_t>(n.id())];
  return site < 0 ? kDp : comm_class(m.sites[static_cast<size_t>(site)].dim);
}

size_t critical_rank(const pb::ExecGraph& g) {
  size_t best = 0;
  double latest = -1;
  for (int i = 0; i < g.ranks_size(); ++i) {
    double end = 0;
    for (const auto& n : g.ranks(i).nodes()) end = std::max(end, n.start_s() + n.duration_s());
    if (end > latest) latest = end, best = static_cast<size_t>(i);
  }
  return best;
}

void fill_breakdown(const Model& m, const RunStats& stats, pb::StepBreakdown& b) {
  if (m.graph.ranks_size() == 0) return;
  const double step = stats.makespan_s;
  const size_t rank = critical_rank(m.graph);
  struct Mark {
    double t;
    int delta;
    Class c;
  };
  std::vector<Mark> marks;
  for (const auto& n : m.graph.ranks(static_cast<int>(rank)).nodes()) {
    if (n.duration_s() <= 0) continue;
    const Class c = class_of(m, rank, n);
    marks.push_back({n.start_s(), +1, c});
    marks.push_back({n.start_s() + n.duration_s(), -1, c});
  }
  std::sort(marks.begin(), marks.end(), [](const Mark& a, const Mark& b) { return a.t < b.t; });
  std::array<int, kClasses> active{};
  std::array<double, kClasses> time{};
  double busy = 0, t = 0;
  for (const Mark& mk : marks) {
    const double span = mk.t - t;
    if (span > 0) {
      int owner = -1;
      if (active[kOptimizer] > 0)
        owner = kOptimizer;
      else if (active[kRecompute] > 0)
        owner = kRecompute;
      else if (active[kCompute] > 0)
        owner = kCompute;
      else {
        for (int c = kTp; c < kClasses && owner < 0; ++c) {
          if (active[static_cast<size_t>(c)] > 0) owner = c;
        }
      }
      if (owner >= 0) time[static_cast<size_t>(owner)] += span, busy += span;
      t = mk.t;
    }
    active[static_cast<size_t>(mk.c)] += mk.delta;
  }
  b.set_compute_s(time[kCompute] + time[kRecompute]);
  b.set_recompute_s(time[kRecompute]);
  b.set_optimizer_s(time[kOptimizer]);
  for (int c = kTp; c < kClasses; ++c) {
    if (time[static_cast<size_t>(c)] <= 0) continue;
    auto* e = b.add_exposed_comm();
    e->set_name(kCommNames[static_cast<size_t>(c - kTp)]);
    e->set_seconds(time[static_cast<size_t>(c)]);
  }
  // The dispatch overhead is idle time between the rank's ops, not the bubble's.
  const double dispatch = rank < stats.dispatch_s.size() ? stats.dispatch_s[rank] : 0;
  b.set_dispatch_s(dispatch);
  b.set_pipeline_bubble_s(std::max(0.0, step - busy - dispatch));
}

}  // namespace

pb::SimResult make_result(const plan::ResolvedPlan& plan, const Model& model,
                          const RunStats& stats) {
  pb::SimResult r;
  r.set_engine("des");
  r.set_model(plan.model.name());
  r.set_cluster(plan.cluster.name());
  r.set_step_time_s(stats.makespan_s);
  fill_breakdown(model, stats, *r.mutable_breakdown());
  for (auto& mem : memory_per_stage(plan)) *r.add_memory() = std::move(mem);
  double recompute_flops = 0;
  for (const auto& rg : model.graph.ranks()) {
    for (const auto& n : rg.nodes()) {
      if (n.phase() == pb::PHASE_RECOMPUTE) recompute_flops += n.flops();
    }
  }
  if (model.graph.ranks_size() > 0) {
    recompute_flops *= static_cast<double>(plan.world_size()) / model.graph.ranks_size();
  }
  fill_throughput(plan, recompute_flops, r);
  r.set_events(stats.events);
  return r;
}

}  // namespace orrery::sim::des
