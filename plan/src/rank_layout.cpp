#include "orrery/plan/rank_layout.hpp"

#include <algorithm>

#include "orrery/base/error.hpp"

namespace orrery::plan {

const char* to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
      return "tp";
    case GroupKind::kCp:
      return "cp";
    case GroupKind::kDp:
      return "dp";
    case GroupKind::kDpCp:
      return "dp_cp";
    case GroupKind::kPp:
      return "pp";
    case GroupKind::kEp:
      return "ep";
    case GroupKind::kEdp:
      return "edp";
    case GroupKind::kDpShard:
      return "dp_shard";
    case GroupKind::kDpReplica:
      return "dp_replica";
    case GroupKind::kEtp:
      return "etp";
  }
  return "?";
}

RankLayout::RankLayout(const Degrees& degrees, const std::vector<Dim>& placement,
                       int64_t shard_group_size, std::vector<Degrees> stages)
    : degrees_(degrees),
      placement_(placement),
      shard_(shard_group_size),
      stages_(std::move(stages)) {
  ORRERY_CHECK(placement_.size() == 4, "placement must order all four dimensions");
  ORRERY_CHECK(shard_ == 0 || !stages_.empty() || degrees_.dp % shard_ == 0,
               "shard group must divide dp");
  if (!stages_.empty()) {
    ORRERY_CHECK(static_cast<int64_t>(stages_.size()) == degrees_.pp,
                 "one stage degree per pipeline rank");
    ORRERY_CHECK(placement_.back() == Dim::kPp, "stages with their own degrees need pp outermost");
    offset_.push_back(0);
    for (const auto& d : stages_) {
      ORRERY_CHECK(shard_ == 0 || d.dp % shard_ == 0, "shard group must divide every stage's dp");
      offset_.push_back(offset_.back() + d.tp * d.cp * d.dp);
    }
  }
}

int64_t RankLayout::world_size() const {
  return stages_.empty() ? degrees_.world_size() : offset_.back();
}

const Degrees& RankLayout::at(int64_t p) const {
  return stages_.empty() ? degrees_ : stages_.at(static_cast<size_t>(p));
}

int64_t RankLayout::extent(Dim dim, const Degrees& d) const {
  switch (dim) {
    case Dim::kTp:
      return d.tp;
    case Dim::kCp:
      return d.cp;
    case Dim::kDp:
      return d.dp;
    case Dim::kPp:
      return stages_.empty() ? d.pp : 1;
  }
  return 1;
}

int64_t RankLayout::stride(Dim dim, const Degrees& d) const {
  int64_t s = 1;
  for (Dim x : placement_) {
    if (x == dim) return s;
    s *= extent(x, d);
  }
  ORRERY_CHECK(false, "dimension missing from the placement");
}

RankCoord RankLayout::coord(int64_t rank) const {
  ORRERY_CHECK(rank >= 0 && rank < world_size(), "rank out of range");
  int64_t p = 0, local = rank;
  if (!stages_.empty()) {
    p = std::upper_bound(offset_.begin(), offset_.end(), rank) - offset_.begin() - 1;
    local = rank - offset_[static_cast<size_t>(p)];
  }
  const Degrees& d = at(p);
  auto of = [&](Dim x) { return local / stride(x, d) % extent(x, d); };
  return {of(Dim::kTp), of(Dim::kCp), of(Dim::kDp), stages_.empty() ? of(Dim::kPp) : p};
}

int64_t RankLayout::rank(const RankCoord& c) const {
  const Degrees& d = at(stages_.empty() ? 0 : c.pp);
  const int64_t local =
      c.tp * stride(Dim::kTp, d) + c.cp * stride(Dim::kCp, d) + c.dp * stride(Dim::kDp, d);
  if (!stages_.empty()) return offset_.at(static_cast<size_t>(c.pp)) + local;
  return local + c.pp * stride(Dim::kPp, d);
}

std::vector<int64_t> RankLayout::group(GroupKind kind, int64_t r) const {
  const RankCoord c = coord(r);
  const Degrees& d = at(stages_.empty() ? 0 : c.pp);  // this rank's stage
  std::vector<int64_t> out;
  // The (cp, dp) plane, dp-major inside: position = dp * cp + cp_index. EP groups are ep
  // consecutive positions of it, EDP groups the positions with the same index inside their
  // EP group (Megatron's expert-parallel rank generator folds CP into DP the same way).
  const int64_t plane = c.dp * d.cp + c.cp;
  auto from_plane = [&](int64_t pos) {
    RankCoord x = c;
    x.dp = pos / d.cp;
    x.cp = pos % d.cp;
    return rank(x);
  };
  if (d.folded() && (kind == GroupKind::kEp || kind == GroupKind::kEdp || kind == GroupKind::kEtp))
    return folded_group(kind, c, d);
  switch (kind) {
    case GroupKind::kEtp:
      out.push_back(r);  // not folded: the experts use the TP group
      break;
    case GroupKind::kTp:
      for (int64_t i = 0; i < d.tp; ++i) out.push_back(rank({i, c.cp, c.dp, c.pp}));
      break;
    case GroupKind::kCp:
      for (int64_t i = 0; i < d.cp; ++i) out.push_back(rank({c.tp, i, c.dp, c.pp}));
      break;
    case GroupKind::kDp:
      for (int64_t i = 0; i < d.dp; ++i) out.push_back(rank({c.tp, c.cp, i, c.pp}));
      break;
    case GroupKind::kDpCp:
      for (int64_t i = 0; i < d.dp * d.cp; ++i) out.push_back(from_plane(i));
      break;
    case GroupKind::kPp:
      if (!stages_.empty()) {
        out.push_back(r);  // no rank-to-rank pairing between stages of different shapes
        break;
      }
      for (int64_t i = 0; i < d.pp; ++i) out.push_back(rank({c.tp, c.cp, c.dp, i}));
      break;
    case GroupKind::kEp: {
      const int64_t first = plane / d.ep * d.ep;
      for (int64_t i = 0; i < d.ep; ++i) out.push_back(from_plane(first + i));
      break;
    }
    case GroupKind::kEdp: {
      const int64_t offset = plane % d.ep;
      for (int64_t i = offset; i < d.dp * d.cp; i += d.ep) {
        out.push_back(from_plane(i));
      }
      break;
    }
    case GroupKind::kDpShard: {
      // The dp ranks [first, first + size) with every CP rank of theirs: consecutive positions
      // of the plane (torchtitan shards over its dp_shard x cp mesh).
      const int64_t size = shard_ > 0 ? shard_ : d.dp;
      const int64_t first = c.dp / size * size;
      for (int64_t i = first * d.cp; i < (first + size) * d.cp; ++i) out.push_back(from_plane(i));
      break;
    }
    case GroupKind::kDpReplica: {
      const int64_t size = shard_ > 0 ? shard_ : d.dp;
      for (int64_t i = c.dp % size; i < d.dp; i += size) out.push_back(rank({c.tp, c.cp, i, c.pp}));
      break;
    }
  }
  return out;
}

std::vector<int64_t> RankLayout::folded_group(GroupKind kind, const RankCoord& c,
                                              const Degrees& d) const {
  const int64_t pos = (c.dp * d.cp + c.cp) * d.tp + c.tp;
  auto at = [&](int64_t p) {
    RankCoord x = c;
    x.tp = p % d.tp;
    x.cp = p / d.tp % d.cp;
    x.dp = p / (d.tp * d.cp);
    return rank(x);
  };
  const int64_t e = d.etp, i_etp = pos % e, i_ep = pos / e % d.ep, i_edp = pos / (e * d.ep);
  std::vector<int64_t> out;
  switch (kind) {
    case GroupKind::kEtp:
      for (int64_t i = 0; i < e; ++i) out.push_back(at(i + e * (i_ep + d.ep * i_edp)));
      break;
    case GroupKind::kEp:
      for (int64_t i = 0; i < d.ep; ++i) out.push_back(at(i_etp + e * (i + d.ep * i_edp)));
      break;
    default:  // kEdp
      for (int64_t i = 0; i < d.edp(); ++i) out.push_back(at(i_etp + e * (i_ep + d.ep * i)));
  }
  return out;
}

int64_t RankLayout::index_in_group(GroupKind kind, int64_t r) const {
  const auto g = group(kind, r);
  return std::find(g.begin(), g.end(), r) - g.begin();
}

namespace {
constexpr GroupKind kAllKinds[] = {
    GroupKind::kTp, GroupKind::kCp,  GroupKind::kDp,      GroupKind::kDpCp,      GroupKind::kPp,
    GroupKind::kEp, GroupKind::kEdp, GroupKind::kDpShard, GroupKind::kDpReplica, GroupKind::kEtp};
}

bool RankLayout::active(GroupKind kind) const {
  return shard_ > 0 || (kind != GroupKind::kDpShard && kind != GroupKind::kDpReplica);
}

std::vector<pb::ProcessGroup> RankLayout::process_groups() const {
  std::vector<pb::ProcessGroup> out;
  for (GroupKind kind : kAllKinds) {
    if (!active(kind)) continue;
    std::vector<bool> done(static_cast<size_t>(world_size()), false);
    for (int64_t r = 0; r < world_size(); ++r) {
      if (done[static_cast<size_t>(r)]) continue;
      const auto members = group(kind, r);
      for (int64_t m : members) done[static_cast<size_t>(m)] = true;
      if (members.size() < 2) continue;
      pb::ProcessGroup g;
      g.set_id(static_cast<int64_t>(out.size()));
      g.set_dim(to_string(kind));
      for (int64_t m : members) g.add_ranks(m);
      out.push_back(std::move(g));
    }
  }
  return out;
}

int64_t RankLayout::group_id(GroupKind kind, int64_t r) const {
  // Same enumeration as process_groups(), without building the member lists of other kinds.
  int64_t id = 0;
  for (GroupKind k : kAllKinds) {
    if (!active(k)) continue;
    std::vector<bool> done(static_cast<size_t>(world_size()), false);
    for (int64_t x = 0; x < world_size(); ++x) {
      if (done[static_cast<size_t>(x)]) continue;
      const auto members = group(k, x);
      for (int64_t m : members) done[static_cast<size_t>(m)] = true;
      const bool mine = k == kind && std::find(members.begin(), members.end(), r) != members.end();
      if (members.size() < 2) {
        if (mine) return -1;
        continue;
      }
      if (mine) return id;
      ++id;
    }
  }
  ORRERY_CHECK(false, "rank has no group of this kind");
}

RankLayout rank_layout(const ResolvedPlan& plan) {
  return RankLayout(plan.degrees, plan.placement,
                    plan.sharding() == pb::SHARDING_HSDP ? plan.plan.shard_group_size() : 0,
                    plan.stage_degrees);
}

RankLayout layout_of(const pb::Plan& plan) {
  return RankLayout(degrees_of(plan.parallel()), parse_placement(plan.placement_order()),
                    plan.sharding() == pb::SHARDING_HSDP ? plan.shard_group_size() : 0);
}

}  // namespace orrery::plan
