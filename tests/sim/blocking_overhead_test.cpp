// The blocking overhead of a calibration profile (CalibrationProfile.blocking_overhead): every
// collective a rank issues in line with its compute (the compute stream's TP collectives) costs
// that much more per message round of its kind (or per collective, in a profile that predates
// per_round_s), in both engines, and collectives on communication streams cost nothing more.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/sim/collective_cost.hpp"

namespace orrery::sim {
namespace {

struct Steps {
  double analytic = 0, des = 0;
};

// `per_round`: the overhead as calibrate writes it (per message round); otherwise as a profile
// written before per_round_s existed holds it (per collective).
Steps steps(const plan::ResolvedPlan& plan, double overhead_s, bool per_round = true) {
  pb::CalibrationProfile profile;
  if (overhead_s > 0) {
    pb::BlockingOverhead* o = profile.add_blocking_overhead();
    o->set_scope("intra_node");
    if (per_round)
      o->set_per_round_s(overhead_s);
    else
      o->set_overhead_s(overhead_s);
  }
  const auto [a, d] = test::simulate_both(plan, profile);
  return {a.step_time_s(), d.step_time_s()};
}

// Collectives rank 0 issues on its compute stream in one step, and their message rounds.
struct InLine {
  int64_t collectives = 0, rounds = 0;
};
InLine blocking_collectives(const plan::ResolvedPlan& plan) {
  plan::LowerOptions options;
  options.ranks = {0};
  const pb::ExecGraph g = plan::lower(plan, options);
  InLine n;
  for (const auto& node : g.ranks(0).nodes()) {
    if (node.kind() != pb::NODE_KIND_COLLECTIVE || node.stream() != plan::kCompute) continue;
    ++n.collectives;
    n.rounds += message_rounds(
        node.collective(), g.process_groups(static_cast<int>(node.process_group())).ranks_size());
  }
  return n;
}

TEST(BlockingOverhead, MessageRoundsOfARing) {
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_ALL_REDUCE, 8), 14);
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_ALL_REDUCE, 2), 2);
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_ALL_GATHER, 8), 7);
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_REDUCE_SCATTER, 2), 1);
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_ALL_TO_ALL, 4), 3);
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_BROADCAST, 8), 1);
  EXPECT_EQ(message_rounds(pb::COLLECTIVE_KIND_ALL_REDUCE, 1), 0);
}

TEST(BlockingOverhead, EveryInLineCollectiveCostsItPerRoundInBothEngines) {
  // tp 8 with SP: all-gathers and reduce-scatters (7 rounds each) and the loss's all-reduces (14).
  const plan::ResolvedPlan plan = test::dgx_h100_plan(8, 1, true);
  const InLine n = blocking_collectives(plan);
  ASSERT_GT(n.collectives,
            100);  // 32 layers x 2 micro-batches x (4 forward + 4 backward) and the head's
  EXPECT_GT(n.rounds, 7 * n.collectives);  // some all-reduces among them
  const Steps none = steps(plan, 0), slow = steps(plan, 1e-4);
  // One pipeline stage, no overlap: each of them sits on the step's critical path.
  EXPECT_NEAR(slow.analytic - none.analytic, static_cast<double>(n.rounds) * 1e-4, 1e-9)
      << n.rounds << " rounds";
  EXPECT_NEAR(slow.des - none.des, static_cast<double>(n.rounds) * 1e-4, 1e-6)
      << n.rounds << " rounds";
}

TEST(BlockingOverhead, AnOlderProfilesOverheadIsPerCollective) {
  const plan::ResolvedPlan plan = test::dgx_h100_plan(8, 1);
  const InLine n = blocking_collectives(plan);
  const Steps none = steps(plan, 0), slow = steps(plan, 1e-3, false);
  EXPECT_NEAR(slow.analytic - none.analytic, static_cast<double>(n.collectives) * 1e-3, 1e-9)
      << n.collectives;
  EXPECT_NEAR(slow.des - none.des, static_cast<double>(n.collectives) * 1e-3, 1e-6)
      << n.collectives;
}

TEST(BlockingOverhead, CollectivesOnCommunicationStreamsPayNothing) {
  // dp 8, tp 1: the only collectives are the DP reduction's, on the DP stream.
  const plan::ResolvedPlan plan = test::dgx_h100_plan(1, 8);
  EXPECT_EQ(blocking_collectives(plan).collectives, 0);
  const Steps none = steps(plan, 0), slow = steps(plan, 1e-3);
  EXPECT_DOUBLE_EQ(slow.analytic, none.analytic);
  EXPECT_DOUBLE_EQ(slow.des, none.des);
}

}  // namespace
}  // namespace orrery::sim
