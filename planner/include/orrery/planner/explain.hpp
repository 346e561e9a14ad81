// Why a plan is as fast as it is: its step split into named terms (useful compute, recomputation,
// exposed communication per dimension, pipeline bubble, optimizer), the term that limits it, and
// one line comparing it with the winner.
#pragma once

#include <string>
#include <vector>

#include "orrery/pb/sim_result.pb.h"
#include "orrery/planner/search.hpp"

namespace orrery::planner {

struct Term {
  std::string name;  // "compute", "recompute", "exposed tp", ..., "bubble", "optimizer"
  double seconds = 0;
  double share = 0;  // of the step time
};

// The step's terms with time > 0, largest first (ties by name).
std::vector<Term> step_terms(const pb::SimResult& result);
// The largest term other than useful compute; name empty when there is none.
Term limiting_term(const pb::SimResult& result);
// "bubble 18%".
std::string describe(const Term& term);
// "tp8 pp4 dp32 sp mbs1 x32 1f1b zero1 recompute=selective, placement tp,cp,pp,dp, ..."
std::string plan_label(const RankedPlan& plan);
// One line on why `best` wins (against `second` when there is one).
std::string why_best(const RankedPlan& best, const RankedPlan* second);
// One line on what limits `plan` relative to `best`: "+4.1%: exposed dp 9% (winner 2%)".
std::string what_limits(const RankedPlan& plan, const RankedPlan& best);

// For MoE models, which expert layouts the space held: unfolded (ep from dp x cp, experts split
// by tp) and folded (parallel.etp, ep from tp x cp x dp); "" for dense models.
std::string expert_layouts_note(const pb::ModelSpec& model, const SpaceOptions& options);

}  // namespace orrery::planner
