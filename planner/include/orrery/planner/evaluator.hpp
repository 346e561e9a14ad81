// How the planner costs one candidate: the simulator's rules (resolve_plan), then its memory
// model (cheap, so every candidate is checked for memory before any timing), then an engine.
// Engines sit behind `Engine` so that a slower, more faithful one (des) can re-rank the best
// candidates the analytic engine found; implementations must be safe to call from several
// threads at once.
#pragma once

#include <string>

#include "orrery/pb/sim_result.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/planner/plan_space.hpp"
#include "orrery/sim/engine.hpp"

namespace orrery::planner {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string name() const = 0;
  virtual pb::SimResult simulate(const plan::ResolvedPlan& plan) const = 0;
  // A deterministic estimate of what simulating `plan` costs, in the engine's own units (0 when
  // negligible), so that a search can decide before running anything whether it can afford it.
  virtual double work(const plan::ResolvedPlan&) const { return 0; }
};

// The discrete-event engine (contention on the topology's links). Each call forks a SimGrid
// engine; simulate_des serializes only the forks, so the planner's threads run several at once.
class DesEngine : public Engine {
 public:
  explicit DesEngine(const sim::CostModels& costs) : costs_(costs) {}
  std::string name() const override { return "des"; }
  pb::SimResult simulate(const plan::ResolvedPlan& plan) const override;
  // Layer passes it simulates, weighted by what a context-parallel ring adds to each: its
  // symmetric mode runs one rank per pp index (per (cp, pp) index when the cp ring does not
  // fold), each through every micro-batch of its layers, so micro-batches x layers (x cp
  // unfolded) x ring weight (1 at cp 1; e.g. 2,560 for llama3-70b tp8 pp4 with 32
  // micro-batches: about 0.9 s on the development machine; docs/planner.md has the weights).
  // Stages with their own degrees are simulated without symmetry: every rank through its
  // stage's layers.
  double work(const plan::ResolvedPlan& plan) const override;

 private:
  const sim::CostModels& costs_;
};

// The closed-form engine. One CostModels serves every thread: its models are functions of the
// topology and calibration, and the one cache they keep (the collective model's groups, whose
// routes it looked up) is locked.
class AnalyticEngine : public Engine {
 public:
  explicit AnalyticEngine(const sim::CostModels& costs) : costs_(costs) {}
  std::string name() const override { return "analytic"; }
  pb::SimResult simulate(const plan::ResolvedPlan& plan) const override;

 private:
  const sim::CostModels& costs_;
};

struct Evaluation {
  enum class Status { kInvalid, kOutOfMemory, kFits, kTimed };
  Status status = Status::kInvalid;
  std::string reason;     // invalid: the rule resolve_plan named
  double peak_bytes = 0;  // the pipeline rank with the highest peak / capacity
  double capacity_bytes = 0;
  pb::SimResult result;  // kTimed only
  double step_time_s() const { return result.step_time_s(); }
};

// Rules and memory only (status kInvalid, kOutOfMemory or kFits).
Evaluation check(const PlanSpace& space, const Knobs& knobs);
// Rules, memory, then `engine` when the plan fits (kTimed).
Evaluation evaluate(const PlanSpace& space, const Knobs& knobs, const Engine& engine);

}  // namespace orrery::planner
