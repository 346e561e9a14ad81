#include "moves.hpp"

#include <algorithm>

namespace orrery::planner::detail {
namespace {

void add(std::vector<Move>& out, Knobs k, std::vector<std::string> targets) {
  out.push_back({std::move(k), std::move(targets)});
}

}  // namespace

MoveGenerator::MoveGenerator(const PlanSpace& space) : space_(space), shapes_(space.shapes()) {}

Knobs MoveGenerator::reshape(const Knobs& from, const Shape& to) const {
  Knobs k = space_.seed(to, from.micro_batch, from.sharding, from.shard_group, from.recompute);
  k.placement = from.placement;
  k.bucket_bytes = from.bucket_bytes;
  k.overlap = from.overlap;
  k.tp_overlap = k.tp_overlap && from.tp_overlap;
  k.a2a_overlap = from.a2a_overlap;  // kept where still allowed (moves())
  k.recompute_every = from.recompute_every;
  if (to.tp > 1 && space_.options().sp_both_ways) k.sp = from.sp;
  if (!k.balanced_split && to.pp > 1 && to.vp == 1) k.balanced_split = from.balanced_split;
  const auto mbs = space_.micro_batches(to);
  if (!mbs.empty() && std::find(mbs.begin(), mbs.end(), k.micro_batch) == mbs.end()) {
    // The largest valid micro-batch not above the current one (else the smallest).
    k.micro_batch = mbs.front();
    for (int64_t m : mbs) {
      if (m <= from.micro_batch) k.micro_batch = m;
    }
  }
  if (k.sharding == pb::SHARDING_HSDP) {
    const auto groups = hsdp_groups(to.dp);
    if (groups.empty()) {
      k.sharding = pb::SHARDING_FSDP, k.shard_group = 0;
    } else if (std::find(groups.begin(), groups.end(), k.shard_group) == groups.end()) {
      k.shard_group = groups.back();
      for (int64_t g : groups) {
        if (g <= from.shard_group) k.shard_group = g;
      }
    }
  }
  if (to.dp == 1) k.sharding = pb::SHARDING_NONE, k.shard_group = 0;
  return k;
}

void MoveGenerator::setting_moves(const Knobs& from, std::vector<Move>& out) const {
  const auto& o = space_.options();
  const Shape shape = shape_of(from);
  const auto mbs = space_.micro_batches(shape);
  const auto at = std::find(mbs.begin(), mbs.end(), from.micro_batch);
  if (at != mbs.end() && at != mbs.begin()) {
    Knobs k = from;
    k.micro_batch = *(at - 1);
    add(out, k, {"bubble", "recompute"});
  }
  if (at != mbs.end() && at + 1 != mbs.end()) {
    Knobs k = from;
    k.micro_batch = *(at + 1);
    add(out, k, {"compute", "exposed tp", "exposed pp", "exposed cp", "exposed ep"});
  }
  for (auto r : o.recompute) {
    if (r == from.recompute) continue;
    Knobs k = from;
    k.recompute = r;
    k.recompute_every = 0;
    add(out, k, {"recompute", "exposed dp", "compute"});
  }
  // Full recomputation of every N-th layer: re-run half as many layers (N doubled, while a
  // layer is still re-run) or twice as many (N halved; N 1 is every layer).
  if (from.recompute == pb::RECOMPUTE_FULL) {
    const int64_t every = std::max<int64_t>(1, from.recompute_every);
    if (every * 2 <= space_.job().model.num_layers()) {
      Knobs k = from;
      k.recompute_every = every * 2;
      add(out, k, {"recompute"});
    }
    if (every > 1) {
      Knobs k = from;
      k.recompute_every = every / 2 > 1 ? every / 2 : 0;
      add(out, k, {"recompute", "exposed dp", "compute"});
    }
  }
  for (auto s : o.sharding) {
    if (from.dp == 1 && s != pb::SHARDING_NONE) continue;
    std::vector<int64_t> groups = {0};
    if (s == pb::SHARDING_HSDP) {
      groups.clear();
      for (int64_t g : hsdp_groups(from.dp)) {
        // Stay near the current group size: the neighbours in the list.
        if (from.sharding != pb::SHARDING_HSDP || g == from.shard_group * 2 ||
            g * 2 == from.shard_group) {
          groups.push_back(g);
        }
      }
    }
    for (int64_t g : groups) {
      if (s == from.sharding && g == from.shard_group) continue;
      Knobs k = from;
      k.sharding = s;
      k.shard_group = g;
      add(out, k, {"exposed dp", "recompute", "optimizer"});
    }
  }
  if (from.tp > 1 && o.sp_both_ways) {
    Knobs k = from;
    k.sp = !k.sp;
    k.tp_overlap = k.tp_overlap && k.sp;
    add(out, k, {"exposed tp"});
  }
  if (from.sp && (from.tp_overlap ||
                  space_.seed(shape, 1, pb::SHARDING_NONE, 0, pb::RECOMPUTE_NONE).tp_overlap)) {
    Knobs k = from;
    k.tp_overlap = !k.tp_overlap;
    add(out, k, {"exposed tp", "compute"});
  }
  if (from.a2a_overlap || space_.a2a_overlap_allowed(from)) {
    Knobs k = from;
    k.a2a_overlap = !k.a2a_overlap;
    add(out, k, {"exposed ep"});
  }
  for (const auto& p : o.placements) {
    if (p == from.placement) continue;
    Knobs k = from;
    k.placement = p;
    add(out, k, {"exposed tp", "exposed dp", "exposed pp", "exposed cp", "exposed ep"});
  }
  if (from.dp * from.cp > 1) {
    for (double b : o.bucket_bytes) {
      if (b == from.bucket_bytes) continue;
      Knobs k = from;
      k.bucket_bytes = b;
      add(out, k, {"exposed dp"});
    }
  }
  const bool even =
      from.stage_groups.empty() && space_.job().model.num_layers() % (from.pp * from.vp) == 0;
  if (from.pp > 1 && from.vp == 1 && even) {
    Knobs k = from;
    k.balanced_split = !k.balanced_split;
    add(out, k, {"bubble"});
  }
}

void MoveGenerator::shape_moves(const Knobs& from, std::vector<Move>& out) const {
  const Shape here = shape_of(from);
  for (const Shape& s : shapes_) {
    if (s == here) continue;
    const int changed =
        (s.tp != here.tp) + (s.pp != here.pp) + (s.dp != here.dp) + (s.cp != here.cp);
    // ep and etp move together: one expert layout of the same ranks for another.
    const bool same_experts = s.ep == here.ep && s.etp == here.etp;
    const bool degrees_alike = changed == 0 && same_experts && s.vp == here.vp;
    const bool staged = !s.stage_tp.empty() || !here.stage_tp.empty();
    // Per-stage degrees: any re-sharding of the same stages on the same node groups is one move
    // (the stage groups trade tp for dp, or a stage group's dp for another's).
    const bool neighbour = staged ? s.pp == here.pp && s.stage_groups == here.stage_groups
                                  : (changed == 2 && same_experts && s.vp == here.vp) ||
                                        (changed == 0 && !same_experts != (s.vp != here.vp) &&
                                         s.stage_groups == here.stage_groups) ||
                                        (degrees_alike && s.stage_groups != here.stage_groups);
    if (!neighbour) continue;
    std::vector<std::string> targets;
    if (s.pp < here.pp || s.vp > here.vp) targets.push_back("bubble");
    if (s.pp < here.pp) targets.push_back("exposed pp");
    if (s.tp < here.tp) targets.push_back("exposed tp");
    if (s.cp < here.cp) targets.push_back("exposed cp");
    if (!same_experts) targets.push_back("exposed ep");
    if (s.dp < here.dp) targets.push_back("exposed dp"), targets.push_back("optimizer");
    if (s.tp > here.tp || s.pp > here.pp || s.cp > here.cp) targets.push_back("recompute");
    if (s.stage_groups != here.stage_groups || staged) targets.push_back("bubble");
    if (staged)
      targets.push_back("exposed tp"), targets.push_back("exposed dp"),
          targets.push_back("exposed pp");
    add(out, reshape(from, s), std::move(targets));
  }
}

std::vector<Move> MoveGenerator::moves(const Knobs& from) const {
  std::vector<Move> out;
  setting_moves(from, out);
  shape_moves(from, out);
  // A move to full recomputation, FSDP or a shape without experts across ranks takes the
  // all-to-all overlap off (a plan rule, or the des ranking, would refuse it).
  for (auto& m : out)
    m.knobs.a2a_overlap = m.knobs.a2a_overlap && space_.a2a_overlap_allowed(m.knobs);
  return out;
}

}  // namespace orrery::planner::detail
