#include "orrery/planner/evaluator.hpp"

#include "orrery/sim/des_engine.hpp"

#include "orrery/base/error.hpp"
#include "orrery/sim/memory_model.hpp"

namespace orrery::planner {
namespace {

// Resolves and checks memory; fills `resolved` when the plan is valid.
Evaluation check_into(const PlanSpace& space, const Knobs& knobs, plan::ResolvedPlan* resolved) {
  Evaluation e;
  try {
    *resolved = plan::resolve_plan(space.plan(knobs), space.job().model, space.job().cluster);
  } catch (const base::InputError& error) {
    e.status = Evaluation::Status::kInvalid;
    e.reason = error.what();
    return e;
  }
  double worst = -1;
  for (const auto& m : sim::memory_per_stage(*resolved)) {
    const double ratio = m.peak_bytes() / m.capacity_bytes();
    if (ratio > worst)
      worst = ratio, e.peak_bytes = m.peak_bytes(), e.capacity_bytes = m.capacity_bytes();
  }
  e.status = worst > 1 ? Evaluation::Status::kOutOfMemory : Evaluation::Status::kFits;
  return e;
}

// What one layer pass of a simulated rank costs the des engine relative to a pass without
// context parallelism: its attention runs as cp ring pieces with cp - 1 transfers each, so the
// pass grows linearly with cp. Measured on llama3-70b at 1,024 GPUs (docs/planner.md): 1.6,
// 2.3 and 3.7 per pass at cp 4, 8 and 16 folded, 1.5 and 2.3 at cp 4 and 8 unfolded.
double ring_weight(int64_t cp) { return 1 + static_cast<double>(cp - 1) / 5; }

}  // namespace

pb::SimResult AnalyticEngine::simulate(const plan::ResolvedPlan& plan) const {
  return sim::simulate_analytic(plan, costs_).result;
}

pb::SimResult DesEngine::simulate(const plan::ResolvedPlan& plan) const {
  sim::DesOptions options;
  options.timeline = false;
  pb::SimResult r = sim::simulate_des(plan, costs_, options).result;
  r.clear_wall_time_s();  // plans are ranked and printed deterministically
  return r;
}

double DesEngine::work(const plan::ResolvedPlan& plan) const {
  if (!plan.uniform_stages()) {
    // Stages with their own degrees run without symmetry: every rank through its stage's layers.
    double passes = 0;
    for (int64_t p = 0; p < plan.degrees.pp; ++p) {
      const auto& d = plan.stage(p);
      passes +=
          static_cast<double>(d.tp * d.cp * d.dp * plan.layers_per_stage[static_cast<size_t>(p)]);
    }
    return passes * static_cast<double>(plan.num_micro_batches);
  }
  // One simulated rank per pp index, or per (cp, pp) index when the cp ring does not fold
  // (sim::des_simulated_ranks decides as the engine does), each through every micro-batch of
  // its stage's layers.
  const int64_t ranks = sim::des_simulated_ranks(plan, costs_);
  const int64_t per_stage = ranks / plan.degrees.pp;  // 1 folded (or cp = 1), cp unfolded
  const double passes =
      static_cast<double>(per_stage * plan.num_micro_batches * plan.model.num_layers());
  return passes * ring_weight(plan.degrees.cp);
}

Evaluation check(const PlanSpace& space, const Knobs& knobs) {
  plan::ResolvedPlan resolved;
  return check_into(space, knobs, &resolved);
}

Evaluation evaluate(const PlanSpace& space, const Knobs& knobs, const Engine& engine) {
  plan::ResolvedPlan resolved;
  Evaluation e = check_into(space, knobs, &resolved);
  if (e.status != Evaluation::Status::kFits) return e;
  e.result = engine.simulate(resolved);
  for (const auto& m : e.result.memory()) {
    // The engine reports the same memory model; a disagreement would be a bug.
    ORRERY_CHECK(!m.oom(), "engine reports OOM for a plan the memory model accepted");
  }
  e.status = Evaluation::Status::kTimed;
  return e;
}

}  // namespace orrery::planner
