// Readable rendering of a simulation result (shared by simulate and, later, plan).
#pragma once

#include <string>
#include <vector>

#include "orrery/pb/sim_result.pb.h"
#include "orrery/plan/framework_profile.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::cli {

// "tp8 pp2 dp8 sp vp2 mbs1 1f1b zero1 recompute=full" — the plan in one line.
std::string plan_summary(const plan::ResolvedPlan& plan);

std::string render_result(const plan::ResolvedPlan& plan, const pb::SimResult& result);

// The fields a framework profile filled and the ones the plan stated over it ("" when the plan
// names no framework), so that no value comes from a profile unsaid.
std::string render_profile(const plan::AppliedProfile& profile);
// The same as SimResult.framework prints it in --json (simulate, and each case of validate --runs).
pb::FrameworkApplied profile_message(const plan::AppliedProfile& profile);

// "" when every rank fits; else the rank furthest past its device's memory, as
// "rank 3 peaks at 92.1 GiB of 79.6 GiB".
std::string out_of_memory(const pb::SimResult& result);

// The rank whose peak is the largest share of its device's memory (nullptr without ranks).
const pb::RankMemory* tightest_rank(const pb::SimResult& result);

// One simulated plan as a CSV row (simulate --csv, one row per point of sweep --csv): the job,
// the plan, the headline figures, every breakdown term and the tightest rank's memory.
std::vector<std::string> sim_csv_header();
std::vector<std::string> sim_csv_row(const plan::ResolvedPlan& plan, const pb::SimResult& result);

}  // namespace orrery::cli
