// RankLayout: where each rank sits in the (tp, cp, dp, pp) grid and which process groups it is in.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "orrery/base/error.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::sim {
namespace {

const std::vector<plan::Dim> kMegatron{plan::Dim::kTp, plan::Dim::kCp, plan::Dim::kDp,
                                       plan::Dim::kPp};

plan::Degrees degrees(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep = 1) {
  plan::Degrees d;
  d.tp = tp, d.cp = cp, d.dp = dp, d.pp = pp, d.ep = ep;
  return d;
}

constexpr plan::GroupKind kDenseKinds[] = {plan::GroupKind::kTp, plan::GroupKind::kCp,
                                           plan::GroupKind::kDp, plan::GroupKind::kDpCp,
                                           plan::GroupKind::kPp};

TEST(RankLayout, CoordAndRankRoundTripUnderEveryPlacement) {
  const plan::Degrees d = degrees(2, 3, 2, 2);  // 24 ranks
  std::vector<plan::Dim> order = kMegatron;
  std::sort(order.begin(), order.end());
  int placements = 0;
  do {
    plan::RankLayout layout(d, order);
    std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
    for (int64_t r = 0; r < 24; ++r) {
      const plan::RankCoord c = layout.coord(r);
      EXPECT_EQ(layout.rank(c), r);
      EXPECT_TRUE(c.tp < 2 && c.cp < 3 && c.dp < 2 && c.pp < 2);
      seen.insert({c.tp, c.cp, c.dp, c.pp});
    }
    EXPECT_EQ(seen.size(), 24u);  // a bijection onto the grid
    ++placements;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(placements, 24);
}

TEST(RankLayout, MegatronOrderStridesAreTpCpDpPp) {
  // tp 2, cp 2, dp 3, pp 2: rank = tp + 2 cp + 4 dp + 12 pp.
  plan::RankLayout layout(degrees(2, 2, 3, 2), kMegatron);
  EXPECT_EQ(layout.rank({1, 1, 2, 1}), 1 + 2 + 8 + 12);
  const plan::RankCoord c = layout.coord(19);  // 19 = 1 + 2x1 + 4x1 + 12x1
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
}

TEST(RankLayout, TpGroupsAreConsecutiveRanks) {
  plan::RankLayout layout(degrees(4, 2, 2, 2), kMegatron);  // 32 ranks
  for (int64_t r = 0; r < 32; ++r) {
    const auto g = layout.group(plan::GroupKind::kTp, r);
    const int64_t first = r / 4 * 4;
    EXPECT_EQ(g, (std::vector<int64_t>{first, first + 1, first + 2, first + 3}));
    EXPECT_EQ(layout.index_in_group(plan::GroupKind::kTp, r), r % 4);
  }
  // Rank 5 = tp 1 + 4 x cp 1 (rank = tp + 4 cp + 8 dp + 16 pp). Its pp group: stride 16.
  EXPECT_EQ(layout.group(plan::GroupKind::kPp, 5), (std::vector<int64_t>{5, 21}));
  // Its dp group: stride tp x cp = 8.
  EXPECT_EQ(layout.group(plan::GroupKind::kDp, 5), (std::vector<int64_t>{5, 13}));
  // The cp group of rank 5: stride tp = 4.
  EXPECT_EQ(layout.group(plan::GroupKind::kCp, 5), (std::vector<int64_t>{1, 5}));
  // dp x cp: same tp and pp, (dp, cp) plane dp-major: positions 0..3 = (0,0), (0,1), (1,0), (1,1).
  EXPECT_EQ(layout.group(plan::GroupKind::kDpCp, 5), (std::vector<int64_t>{1, 5, 9, 13}));
}

TEST(RankLayout, GroupSizesAndMembersShareTheOtherCoordinates) {
  const plan::Degrees d = degrees(2, 2, 3, 2);
  plan::RankLayout layout(d, {plan::Dim::kDp, plan::Dim::kTp, plan::Dim::kPp, plan::Dim::kCp});
  const std::map<plan::GroupKind, size_t> size{{plan::GroupKind::kTp, 2},
                                               {plan::GroupKind::kCp, 2},
                                               {plan::GroupKind::kDp, 3},
                                               {plan::GroupKind::kDpCp, 6},
                                               {plan::GroupKind::kPp, 2}};
  for (int64_t r = 0; r < 24; ++r) {
    const plan::RankCoord me = layout.coord(r);
    for (plan::GroupKind k : kDenseKinds) {
      const auto g = layout.group(k, r);
      EXPECT_EQ(g.size(), size.at(k)) << to_string(k);
      EXPECT_EQ(std::count(g.begin(), g.end(), r), 1) << to_string(k);
      for (int64_t m : g) {
        const plan::RankCoord c = layout.coord(m);
        // Members differ only in the group's own dimensions.
        EXPECT_TRUE(k == plan::GroupKind::kTp || c.tp == me.tp) << to_string(k);
        EXPECT_TRUE(k == plan::GroupKind::kCp || k == plan::GroupKind::kDpCp || c.cp == me.cp)
            << to_string(k);
        EXPECT_TRUE(k == plan::GroupKind::kDp || k == plan::GroupKind::kDpCp || c.dp == me.dp)
            << to_string(k);
        EXPECT_TRUE(k == plan::GroupKind::kPp || c.pp == me.pp) << to_string(k);
      }
    }
  }
}

TEST(RankLayout, ProcessGroupsPartitionTheRanksPerKindWithDeterministicIds) {
  const plan::Degrees d = degrees(2, 2, 2, 2, /*ep=*/2);
  plan::RankLayout layout(d, kMegatron);
  const auto groups = layout.process_groups();
  // Per kind, 16 / size groups: tp 8, cp 8, dp 8, dp_cp 4, pp 8, ep 8, edp 8 = 52.
  ASSERT_EQ(groups.size(), 52u);
  std::map<std::string, std::vector<int>> cover;  // dim -> times each rank appears
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    EXPECT_EQ(g.id(), static_cast<int64_t>(i));  // ids are positions
    auto& seen = cover[g.dim()];
    seen.resize(16, 0);
    for (int64_t r : g.ranks()) ++seen[static_cast<size_t>(r)];
    if (i > 0 && groups[i - 1].dim() == g.dim()) {
      EXPECT_LT(*std::min_element(groups[i - 1].ranks().begin(), groups[i - 1].ranks().end()),
                *std::min_element(g.ranks().begin(), g.ranks().end()));  // by smallest rank
    }
  }
  EXPECT_EQ(cover.size(), 7u);  // no HSDP kinds without a shard group size
  for (const auto& [dim, seen] : cover) {
    for (int c : seen) EXPECT_EQ(c, 1) << dim;  // every rank in exactly one group of each kind
  }
  // Kind-major order: tp first, then cp, dp, dp_cp, pp, ep, edp.
  EXPECT_EQ(groups[0].dim(), "tp");
  EXPECT_EQ(groups[8].dim(), "cp");
  EXPECT_EQ(groups[16].dim(), "dp");
  EXPECT_EQ(groups[24].dim(), "dp_cp");
  EXPECT_EQ(groups[28].dim(), "pp");
  EXPECT_EQ(groups[36].dim(), "ep");
  EXPECT_EQ(groups[44].dim(), "edp");
  // group_id agrees with the listing, and lists the rank.
  const std::map<std::string, plan::GroupKind> kinds{
      {"tp", plan::GroupKind::kTp},      {"cp", plan::GroupKind::kCp}, {"dp", plan::GroupKind::kDp},
      {"dp_cp", plan::GroupKind::kDpCp}, {"pp", plan::GroupKind::kPp}, {"ep", plan::GroupKind::kEp},
      {"edp", plan::GroupKind::kEdp}};
  for (int64_t r = 0; r < 16; ++r) {
    for (const auto& [dim, kind] : kinds) {
      const int64_t id = layout.group_id(kind, r);
      ASSERT_GE(id, 0);
      const auto& g = groups[static_cast<size_t>(id)];
      EXPECT_EQ(g.dim(), dim);
      EXPECT_EQ(std::vector<int64_t>(g.ranks().begin(), g.ranks().end()), layout.group(kind, r));
    }
  }
  // Same inputs, same listing.
  const auto again = plan::RankLayout(d, kMegatron).process_groups();
  ASSERT_EQ(again.size(), groups.size());
  for (size_t i = 0; i < groups.size(); ++i)
    EXPECT_EQ(again[i].SerializeAsString(), groups[i].SerializeAsString());
}

TEST(RankLayout, SizeOneGroupsAreLeftOut) {
  plan::RankLayout layout(degrees(8, 1, 1, 1), kMegatron);
  const auto groups = layout.process_groups();
  // Only the tp group has more than one member (ep = 1 makes EP groups singletons, and EDP the
  // whole dp x cp plane, which is one rank).
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].dim(), "tp");
  EXPECT_EQ(layout.group_id(plan::GroupKind::kTp, 3), 0);
  EXPECT_EQ(layout.group_id(plan::GroupKind::kDp, 3), -1);
  EXPECT_EQ(layout.group_id(plan::GroupKind::kPp, 3), -1);
}

TEST(RankLayout, EpAndEdpPartitionTheDpCpPlane) {
  // tp 2, cp 2, dp 4, pp 1: the (dp, cp) plane of each tp rank has 8 positions, dp-major:
  // position = 2 dp + cp. ep 4: EP groups are positions {0..3}, {4..7}; EDP groups the positions
  // with the same index inside their EP group: {0, 4}, {1, 5}, {2, 6}, {3, 7}.
  const plan::Degrees d = degrees(2, 2, 4, 1, /*ep=*/4);
  plan::RankLayout layout(d, kMegatron);
  // rank = tp + 2 cp + 4 dp; plane position p of tp 0 is rank 2 p.
  EXPECT_EQ(layout.group(plan::GroupKind::kEp, 0), (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEp, 9), (std::vector<int64_t>{9, 11, 13, 15}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEdp, 0), (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEdp, 13), (std::vector<int64_t>{5, 13}));
  for (int64_t r = 0; r < 16; ++r) {
    const auto ep = layout.group(plan::GroupKind::kEp, r);
    const auto edp = layout.group(plan::GroupKind::kEdp, r);
    const auto plane = layout.group(plan::GroupKind::kDpCp, r);
    ASSERT_EQ(ep.size(), 4u);
    ASSERT_EQ(edp.size(), 2u);
    // EP x EDP tiles the plane: one common rank (this one), and together all 8 positions.
    std::set<int64_t> tiles;
    for (int64_t a : ep) {
      for (int64_t b : edp) {
        // The rank at (EP index of a, EDP index of b) is in the plane; all 8 are distinct.
        const int64_t pos = layout.index_in_group(plan::GroupKind::kEdp, b) * 4 +
                            layout.index_in_group(plan::GroupKind::kEp, a);
        tiles.insert(plane[static_cast<size_t>(pos)]);
      }
    }
    EXPECT_EQ(tiles.size(), 8u);
    std::vector<int64_t> common;
    std::set_intersection(ep.begin(), ep.end(), edp.begin(), edp.end(), std::back_inserter(common));
    EXPECT_EQ(common, (std::vector<int64_t>{r}));
    for (int64_t m : ep) EXPECT_EQ(layout.coord(m).tp, layout.coord(r).tp);
  }
}

TEST(RankLayout, FoldedExpertGroupsDrawOnTp) {
  // MoE folding, tp 2, dp 4, pp 2 with ep 4, etp 1 (Megatron-core's EP over TP x DP): a stage's
  // 8 ranks are positions (dp x cp + cp) x tp + tp index = its ranks in order, split as
  // etp index + etp x (ep index + ep x edp index): EP groups {0..3}, {4..7}, EDP {0, 4} ...,
  // and etp groups the rank alone. edp = tp x cp x dp / (ep x etp) = 2.
  plan::Degrees d = degrees(2, 1, 4, 2, /*ep=*/4);
  d.etp = 1;
  ASSERT_EQ(d.edp(), 2);
  plan::RankLayout layout(d, kMegatron);
  EXPECT_EQ(layout.group(plan::GroupKind::kEp, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEp, 13), (std::vector<int64_t>{12, 13, 14, 15}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEdp, 1), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEdp, 14), (std::vector<int64_t>{10, 14}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEtp, 5), (std::vector<int64_t>{5}));
  // The attention's groups stay as they were.
  EXPECT_EQ(layout.group(plan::GroupKind::kTp, 5), (std::vector<int64_t>{4, 5}));
  // etp 2, ep 2: etp groups are rank pairs, EP groups pair positions 2 apart, edp 2.
  d.etp = 2, d.ep = 2;
  plan::RankLayout two(d, kMegatron);
  EXPECT_EQ(two.group(plan::GroupKind::kEtp, 3), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(two.group(plan::GroupKind::kEp, 1), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(two.group(plan::GroupKind::kEdp, 3), (std::vector<int64_t>{3, 7}));
  // The folded EP group rank 0 sits in is not the unfolded one (ranks 0, 2, 4, 6 with tp 2).
  plan::RankLayout unfolded(degrees(2, 1, 4, 2, /*ep=*/4), kMegatron);
  EXPECT_EQ(unfolded.group(plan::GroupKind::kEp, 0), (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(unfolded.group(plan::GroupKind::kEtp, 0), (std::vector<int64_t>{0}));
  // Every kind still partitions the ranks; etp groups show up in the process groups.
  int64_t etp_groups = 0;
  for (const auto& g : two.process_groups()) etp_groups += g.dim() == "etp" ? 1 : 0;
  EXPECT_EQ(etp_groups, 8);
}

TEST(RankLayout, HsdpShardAndReplicaGroups) {
  // dp 8 split into shard groups of 4: shards {0..3}, {4..7}; replicas {0, 4}, {1, 5}, ...
  plan::RankLayout layout(degrees(1, 1, 8, 1), kMegatron, 4);
  EXPECT_EQ(layout.group(plan::GroupKind::kDpShard, 6), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(layout.group(plan::GroupKind::kDpReplica, 6), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(layout.index_in_group(plan::GroupKind::kDpReplica, 6), 1);
  const auto groups = layout.process_groups();
  int shards = 0, replicas = 0;
  for (const auto& g : groups) {
    shards += g.dim() == "dp_shard";
    replicas += g.dim() == "dp_replica";
    if (g.dim() == "dp_shard") {
      EXPECT_EQ(g.ranks_size(), 4);
    }
    if (g.dim() == "dp_replica") {
      EXPECT_EQ(g.ranks_size(), 2);
    }
  }
  EXPECT_EQ(shards, 2);
  EXPECT_EQ(replicas, 4);
  // Without a shard group size those kinds do not exist.
  plan::RankLayout plain(degrees(1, 1, 8, 1), kMegatron);
  for (const auto& g : plain.process_groups()) {
    EXPECT_NE(g.dim(), "dp_shard");
    EXPECT_NE(g.dim(), "dp_replica");
  }
}

TEST(RankLayout, HsdpShardGroupsTakeTheirCpRanks) {
  // cp 2 x dp 4 (cp inner): shard groups of 2 dp ranks with their CP ranks, {0..3} and {4..7};
  // replicas the ranks at the same place of the other shard group, of the same CP index.
  plan::RankLayout layout(degrees(1, 2, 4, 1), kMegatron, 2);
  EXPECT_EQ(layout.group(plan::GroupKind::kDpShard, 5), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(layout.group(plan::GroupKind::kDpReplica, 5), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(layout.index_in_group(plan::GroupKind::kDpShard, 5),
            layout.index_in_group(plan::GroupKind::kDpShard, 1));
  // Without HSDP the shard group is every replica of the weights: dp x cp.
  plan::RankLayout fsdp(degrees(1, 2, 4, 1), kMegatron);
  EXPECT_EQ(fsdp.group(plan::GroupKind::kDpShard, 5), fsdp.group(plan::GroupKind::kDpCp, 5));
}

// The executor forms its process groups from the plan as written (plan::layout_of).
TEST(LayoutOf, DefaultPlacementPutsTpInnermost) {
  pb::Plan p;
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_dp(3);
  const plan::RankLayout layout = plan::layout_of(p);
  EXPECT_EQ(layout.world_size(), 6);
  EXPECT_EQ(layout.group(plan::GroupKind::kTp, 4), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(layout.group(plan::GroupKind::kDp, 1), (std::vector<int64_t>{1, 3, 5}));
}

TEST(LayoutOf, HsdpGroupsAreTheLoweringsUnderSharding) {
  // tp 2 x dp 4 with shard groups of 2: the executor's shard and replica groups are the resolved
  // plan's (what the lowering uses); without sharding hsdp the plan's shard_group_size is unused.
  pb::Plan p;
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_dp(4);
  p.set_shard_group_size(2);
  p.set_sharding(pb::SHARDING_HSDP);
  const plan::RankLayout hsdp = plan::layout_of(p);
  const plan::RankLayout resolved(degrees(2, 1, 4, 1), kMegatron, 2);
  for (int64_t r = 0; r < 8; ++r) {
    for (const auto kind : {plan::GroupKind::kDpShard, plan::GroupKind::kDpReplica}) {
      EXPECT_EQ(hsdp.group(kind, r), resolved.group(kind, r));
      EXPECT_EQ(hsdp.group_id(kind, r), resolved.group_id(kind, r));
    }
  }
  EXPECT_EQ(hsdp.group(plan::GroupKind::kDpShard, 5), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(hsdp.group(plan::GroupKind::kDpReplica, 5), (std::vector<int64_t>{1, 5}));
  p.set_sharding(pb::SHARDING_FSDP);
  for (const auto& g : plan::layout_of(p).process_groups()) EXPECT_NE(g.dim(), "dp_replica");
}

TEST(LayoutOf, ExpertGroupsOfTwoByFour) {
  // tp 2 x dp 4 with ep 2: EP pairs of consecutive dp replicas, EDP the replicas with the same
  // experts.
  pb::Plan p;
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_dp(4);
  p.mutable_parallel()->set_ep(2);
  const plan::RankLayout layout = plan::layout_of(p);
  EXPECT_EQ(layout.group(plan::GroupKind::kEp, 2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEp, 5), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEdp, 2), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(layout.group(plan::GroupKind::kEdp, 1), (std::vector<int64_t>{1, 5}));
}

TEST(LayoutOf, RejectsBadPlacement) {
  try {
    plan::parse_placement("tp,xp");
    FAIL() << "no error";
  } catch (const base::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("placement_order"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown dimension 'xp'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan::parse_placement("tp,dp,tp"), base::InputError);
}

}  // namespace
}  // namespace orrery::sim
