#include "orrery/planner/evaluator.hpp"

#include <mutex>

#include "orrery/sim/des_engine.hpp"

#include "orrery/sim/memory_model.hpp"
#include "orrery/traces/error.hpp"

namespace orrery::planner {
namespace {

// Resolves and checks memory; fills `resolved` when the plan is valid.
Evaluation check_into(const PlanSpace& space, const Knobs& knobs, sim::ResolvedPlan* resolved) {
  Evaluation e;
  try {
    *resolved = sim::resolve_plan(space.plan(knobs), space.job().model, space.job().cluster);
  } catch (const InputError& error) {
    e.status = Evaluation::Status::kInvalid;
    e.reason = error.what();
    return e;
  }
  double worst = -1;
  for (const auto& m : sim::memory_per_stage(*resolved)) {
    const double ratio = m.peak_bytes() / m.capacity_bytes();
    if (ratio > worst) worst = ratio, e.peak_bytes = m.peak_bytes(), e.capacity_bytes = m.capacity_bytes();
  }
  e.status = worst > 1 ? Evaluation::Status::kOutOfMemory : Evaluation::Status::kFits;
  return e;
}

}  // namespace

pb::SimResult AnalyticEngine::simulate(const sim::ResolvedPlan& plan) const {
  return sim::simulate_analytic(plan, costs_).result;
}

pb::SimResult DesEngine::simulate(const sim::ResolvedPlan& plan) const {
  static std::mutex one_fork_at_a_time;
  const std::lock_guard<std::mutex> lock(one_fork_at_a_time);
  sim::DesOptions options;
  options.timeline = false;
  pb::SimResult r = sim::simulate_des(plan, costs_, options).result;
  r.clear_wall_time_s();  // plans are ranked and printed deterministically
  return r;
}

double DesEngine::work(const sim::ResolvedPlan& plan) const {
  return static_cast<double>(plan.degrees.cp * plan.num_micro_batches * plan.model.num_layers());
}

Evaluation check(const PlanSpace& space, const Knobs& knobs) {
  sim::ResolvedPlan resolved;
  return check_into(space, knobs, &resolved);
}

Evaluation evaluate(const PlanSpace& space, const Knobs& knobs, const Engine& engine) {
  sim::ResolvedPlan resolved;
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
