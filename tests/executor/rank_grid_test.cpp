// The executor's placement rule (RankGrid) agrees with the simulator's (sim::RankLayout).
#include <gtest/gtest.h>

#include "orrery/executor/rank_grid.hpp"
#include "orrery/sim/rank_layout.hpp"
#include "orrery/traces/error.hpp"

namespace orrery::executor {
namespace {

sim::Dim to_sim(GridDim d) {
  switch (d) {
    case GridDim::kTp: return sim::Dim::kTp;
    case GridDim::kCp: return sim::Dim::kCp;
    case GridDim::kDp: return sim::Dim::kDp;
    case GridDim::kPp: return sim::Dim::kPp;
  }
  return sim::Dim::kTp;
}

void expect_agrees(const GridDegrees& d, const std::string& order) {
  const auto placement = parse_placement_order(order);
  const RankGrid grid(d, placement);
  std::vector<sim::Dim> sim_placement;
  for (GridDim g : placement) sim_placement.push_back(to_sim(g));
  sim::Degrees sd;
  sd.tp = d.tp; sd.cp = d.cp; sd.dp = d.dp; sd.pp = d.pp; sd.ep = d.ep;
  const sim::RankLayout layout(sd, sim_placement);
  ASSERT_EQ(grid.world_size(), layout.world_size());
  for (int64_t r = 0; r < grid.world_size(); ++r) {
    SCOPED_TRACE("order '" + order + "' rank " + std::to_string(r));
    const auto c = grid.coord(r);
    const auto s = layout.coord(r);
    EXPECT_EQ(c.tp, s.tp);
    EXPECT_EQ(c.cp, s.cp);
    EXPECT_EQ(c.dp, s.dp);
    EXPECT_EQ(c.pp, s.pp);
    EXPECT_EQ(grid.rank(c), r);
    EXPECT_EQ(grid.group(GridDim::kTp, r), layout.group(sim::GroupKind::kTp, r));
    EXPECT_EQ(grid.group(GridDim::kCp, r), layout.group(sim::GroupKind::kCp, r));
    EXPECT_EQ(grid.group(GridDim::kDp, r), layout.group(sim::GroupKind::kDp, r));
    EXPECT_EQ(grid.group(GridDim::kPp, r), layout.group(sim::GroupKind::kPp, r));
    EXPECT_EQ(grid.expert_group(r), layout.group(sim::GroupKind::kEp, r));
    EXPECT_EQ(grid.expert_data_group(r), layout.group(sim::GroupKind::kEdp, r));
  }
}

TEST(RankGrid, AgreesWithSimRankLayout) {
  expect_agrees({2, 1, 2, 1}, "");
  expect_agrees({2, 1, 2, 1}, "dp,tp");
  expect_agrees({2, 2, 2, 2}, "tp,cp,dp,pp");
  expect_agrees({4, 1, 2, 3}, "pp,dp,tp");
  expect_agrees({2, 3, 1, 2}, "cp,ep,pp");
  expect_agrees({8, 1, 4, 2}, "tp,cp,ep,dp,pp");
  // Expert parallelism inside the (cp, dp) plane.
  expect_agrees({1, 1, 2, 1, 2}, "");
  expect_agrees({2, 1, 4, 1, 2}, "");
  expect_agrees({2, 1, 4, 2, 4}, "dp,tp");
  expect_agrees({2, 2, 4, 1, 4}, "tp,cp,dp,pp");
  expect_agrees({1, 3, 2, 2, 3}, "pp,dp,tp");
  expect_agrees({2, 2, 6, 1, 3}, "cp,ep,dp,tp,pp");
}

TEST(RankGrid, ExpertGroupsOfTwoByFour) {
  // tp 2 x dp 4 with ep 2: EP pairs of consecutive dp replicas, EDP the replicas with the same
  // experts.
  const RankGrid grid({2, 1, 4, 1, 2}, parse_placement_order(""));
  EXPECT_EQ(grid.expert_group(2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(grid.expert_group(5), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(grid.expert_data_group(2), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(grid.expert_data_group(1), (std::vector<int64_t>{1, 5}));
}

TEST(RankGrid, DefaultPlacementPutsTpInnermost) {
  pb::Plan plan;
  plan.mutable_parallel()->set_tp(2);
  plan.mutable_parallel()->set_dp(3);
  const RankGrid grid = RankGrid::from_plan(plan);
  EXPECT_EQ(grid.group(GridDim::kTp, 4), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(grid.group(GridDim::kDp, 1), (std::vector<int64_t>{1, 3, 5}));
}

TEST(RankGrid, RejectsBadPlacement) {
  try {
    parse_placement_order("tp,xp");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "placement_order");
    EXPECT_NE(e.reason().find("unknown dimension 'xp'"), std::string::npos) << e.reason();
  }
  EXPECT_THROW(parse_placement_order("tp,dp,tp"), InputError);
}

}  // namespace
}  // namespace orrery::executor
