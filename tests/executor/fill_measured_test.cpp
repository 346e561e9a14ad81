// fill_measured: a rank's per-step op timings into its measured graph. Whole steps are left out
// (those whose wall time a clipped mean drops), never single ops, so the ops' means and the
// untimed time add up to the step time the trace reports.
#include <gtest/gtest.h>

#include "measured_trace.hpp"
#include "orrery/base/statistics.hpp"

namespace orrery::executor {
namespace {

// Two ops per step: `a` 0.1 s and `b` 0.2 s, plus 0.01 s untimed; step 4 (of 0-6) descheduled
// for a whole extra second, and in every step one op hiccups (a by 20 ms in even steps, b by
// 30 ms in odd ones): part of the steps, so part of the means.
struct Steps {
  std::vector<StepTimings> timings;
  std::vector<double> untimed, seconds;
};

Steps steps() {
  Steps r;
  for (int s = 0; s < 7; ++s) {
    StepTimings t;
    const double slow = s == 4 ? 1.0 : 0.0;
    t["a"] = {0.0, 0.1 + (s % 2 == 0 ? 0.02 : 0.0) + slow, 1, "", "fp32"};
    t["b"] = {0.1, 0.2 + (s % 2 == 1 ? 0.03 : 0.0), 1, "", "fp32"};
    r.timings.push_back(t);
    r.untimed.push_back(0.01);
    r.seconds.push_back(t["a"].duration_s + t["b"].duration_s + 0.01);
  }
  return r;
}

pb::RankGraph graph() {
  pb::RankGraph g;
  g.add_nodes()->set_name("a");
  g.add_nodes()->set_name("b");
  return g;
}

TEST(MeasuredTrace, OpsAddUpToTheStepOverTheKeptSteps) {
  const Steps r = steps();
  pb::RankGraph g = graph();
  ASSERT_EQ(fill_measured(g, r.timings, r.untimed, r.seconds), "");
  // Steps 1-6 measured (step 0 is the warm-up); the descheduled step 4 is left out.
  EXPECT_EQ(kept_steps(r.seconds, r.seconds.size()), (std::vector<size_t>{1, 2, 3, 5, 6}));
  const std::vector<double> measured(r.seconds.begin() + 1, r.seconds.end());
  EXPECT_NEAR(g.nodes(0).duration_s() + g.nodes(1).duration_s() + g.untimed_s(),
              base::clipped_mean(measured), 1e-12);
  // a hiccuped in steps 2 and 6 of the kept five, b in 1, 3 and 5.
  EXPECT_NEAR(g.nodes(0).duration_s(), 0.1 + 0.02 * 2 / 5, 1e-12);
  EXPECT_NEAR(g.nodes(1).duration_s(), 0.2 + 0.03 * 3 / 5, 1e-12);
  EXPECT_EQ(g.nodes(0).dtype(), "fp32");
}

TEST(MeasuredTrace, WithoutStepTimesEveryMeasuredStepCounts) {
  const Steps r = steps();
  pb::RankGraph g = graph();
  ASSERT_EQ(fill_measured(g, r.timings, r.untimed, {}), "");
  EXPECT_NEAR(g.nodes(0).duration_s(), 0.1 + (0.02 * 3 + 1.0) / 6, 1e-12);
}

TEST(MeasuredTrace, OpsTheGraphDoesNotShareAreNamed) {
  Steps r = steps();
  r.timings[3]["c"] = {0, 0.1, 1, "", ""};
  r.timings[5].erase("b");
  pb::RankGraph g = graph();
  const std::string problems = fill_measured(g, r.timings, r.untimed, r.seconds);
  EXPECT_NE(problems.find("ran but not in the graph: c"), std::string::npos) << problems;
  EXPECT_NE(problems.find("in the graph but never ran: b"), std::string::npos) << problems;
}

}  // namespace
}  // namespace orrery::executor
