#include "orrery/planner/plan_space.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

#include "orrery/base/error.hpp"
#include "orrery/models/layer_ops.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/planner/layer_partition.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::planner {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

bool allowed(const std::vector<int64_t>& only, int64_t v) {
  return only.empty() || std::find(only.begin(), only.end(), v) != only.end();
}

double training_flops(const std::vector<models::LayerOp>& ops) {
  double f = 0;
  for (const auto& op : ops) f += op.forward_flops + op.backward_flops;
  return f;
}

// The effective order of the parallel dimensions with degree > 1 (placements that agree on it
// place every rank identically).
std::string effective_placement(const std::string& placement, const Knobs& k) {
  const std::string order = placement.empty() ? "tp,cp,dp,pp" : placement;
  std::string out;
  size_t from = 0;
  while (from <= order.size()) {
    size_t comma = order.find(',', from);
    if (comma == std::string::npos) comma = order.size();
    const std::string dim = order.substr(from, comma - from);
    const int64_t degree = dim == "tp"   ? k.tp
                           : dim == "cp" ? k.cp
                           : dim == "dp" ? k.dp
                           : dim == "pp" ? k.pp
                                         : 1;
    if (degree > 1) out += dim + ",";
    from = comma + 1;
  }
  return out;
}

}  // namespace

struct PlanSpace::Cache {
  std::mutex mutex;
  // Keyed by pp, stage groups, stage tp, stage dp.
  std::map<
      std::tuple<int64_t, std::vector<std::string>, std::vector<int64_t>, std::vector<int64_t>>,
      std::vector<int64_t>>
      splits;
};

Shape shape_of(const Knobs& k) {
  return {k.tp, k.pp, k.dp, k.cp, k.ep, k.vp, k.stage_groups, k.stage_tp, k.stage_dp, k.etp};
}

std::string precision_dtype(pb::Precision p) { return plan::precisions_of(p).dtype; }

int64_t nvlink_domain_size(const pb::ClusterSpec& cluster) {
  int64_t smallest = 0;
  for (const auto& g : cluster.node_groups()) {
    for (const auto& t : cluster.node_types()) {
      if (t.name() != g.node_type()) continue;
      const auto kind = t.intra().kind();
      int64_t size = 1;
      if (kind == pb::INTRA_NODE_KIND_NVSWITCH) {
        size = t.devices_per_node() * (t.intra().has_domain_nodes() ? t.intra().domain_nodes() : 1);
      } else if (kind == pb::INTRA_NODE_KIND_MESH) {
        size = t.devices_per_node();
      }
      smallest = smallest == 0 ? size : std::min(smallest, size);
    }
  }
  return std::max<int64_t>(1, smallest);
}

std::vector<int64_t> hsdp_groups(int64_t dp) {
  std::vector<int64_t> out;
  for (int64_t g = 2; g < dp; g *= 2) {
    if (dp % g == 0) out.push_back(g);
  }
  return out;
}

PlanSpace::PlanSpace(PlanningJob job, SpaceOptions options)
    : job_(std::move(job)), options_(std::move(options)), cache_(std::make_shared<Cache>()) {
  devices_ = topologies::total_devices(job_.cluster);
  domain_ = nvlink_domain_size(job_.cluster);
  const std::string dtype = precision_dtype(job_.base.job().precision());
  for (const auto& g : job_.cluster.node_groups()) {
    for (const auto& t : job_.cluster.node_types()) {
      if (t.name() != g.node_type()) continue;
      const auto& device = topologies::find_device(job_.cluster, t.device());
      double peak = topologies::peak_flops(device, dtype);
      if (peak <= 0) peak = device.peak_flops().fp32();
      groups_.push_back({g.name(), g.count() * t.devices_per_node(), peak});
    }
  }
  models::ShardContext ctx;
  ctx.seq_len = job_.base.job().seq_len();
  const auto& m = job_.model;
  for (int64_t l = 0; l < m.num_layers(); ++l) {
    const bool same =
        l > 0 && models::is_moe_layer(m, l) == models::is_moe_layer(m, l - 1) &&
        models::is_local_attention_layer(m, l) == models::is_local_attention_layer(m, l - 1);
    layer_cost_.push_back(
        same ? layer_cost_.back()
             : training_flops(models::layer_ops(m, models::LayerPart::kDecoder, l, ctx)));
  }
  embed_cost_ = training_flops(models::layer_ops(m, models::LayerPart::kEmbedding, 0, ctx));
  head_cost_ = training_flops(models::layer_ops(m, models::LayerPart::kHead, 0, ctx));
}

std::vector<std::vector<std::string>> PlanSpace::stage_assignments(int64_t pp,
                                                                   int64_t per_stage) const {
  if (!heterogeneous()) return {{}};
  // Each node group hosts a whole number of stages; the pipeline visits the groups in every
  // order (the first and last stages carry the embedding and the head).
  std::vector<size_t> order(groups_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::vector<std::string>> out;
  int64_t stages = 0;
  for (const auto& g : groups_) {
    if (g.devices % per_stage != 0) return {};
    stages += g.devices / per_stage;
  }
  if (stages != pp) return {};
  do {
    std::vector<std::string> a;
    for (size_t i : order) {
      for (int64_t s = 0; s < groups_[i].devices / per_stage; ++s) a.push_back(groups_[i].name);
    }
    out.push_back(std::move(a));
  } while (std::next_permutation(order.begin(), order.end()));
  return out;
}

std::vector<Shape> PlanSpace::shapes() const {
  const auto& m = job_.model;
  const auto& o = options_;
  const int64_t seq = job_.base.job().seq_len();
  const int64_t layers = m.num_layers();
  std::vector<Shape> out;
  for (int64_t tp : divisors(devices_)) {
    if (!allowed(o.tp, tp) || (!o.tp_across_nvlink && o.tp.empty() && tp > domain_)) continue;
    for (int64_t cp = 1; cp <= std::min(o.max_cp, devices_ / tp); cp *= 2) {
      if (!allowed(o.cp, cp) || (devices_ / tp) % cp != 0) continue;
      if (cp > 1 && seq % (2 * cp) != 0) continue;
      for (int64_t pp : divisors(devices_ / (tp * cp))) {
        if (!allowed(o.pp, pp) || pp > layers) continue;
        const int64_t dp = devices_ / (tp * cp * pp);
        const auto assignments = stage_assignments(pp, tp * cp * dp);
        // An explicit --vp list is searched as given (max_vp bounds only the default range).
        const int64_t vp_limit =
            o.vp.empty() ? o.max_vp : *std::max_element(o.vp.begin(), o.vp.end());
        for (int64_t vp = 1; vp <= vp_limit; ++vp) {
          if (!allowed(o.vp, vp)) continue;
          if (vp > 1 && (pp < 2 || layers % (pp * vp) != 0 || heterogeneous() ||
                         std::find(o.schedules.begin(), o.schedules.end(),
                                   pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) == o.schedules.end())) {
            continue;
          }
          for (const auto& [ep, etp] : expert_layouts(tp, cp, dp)) {
            models::ShardContext ctx;
            ctx.seq_len = seq, ctx.tp = tp, ctx.cp = cp, ctx.ep = ep, ctx.etp = etp;
            ctx.sequence_parallel = tp > 1;
            if (!models::shard_problem(m, ctx).empty()) continue;
            for (const auto& a : assignments)
              out.push_back({tp, pp, dp, cp, ep, vp, a, {}, {}, etp});
          }
        }
      }
    }
  }
  if (heterogeneous() && options_.stage_degrees) staged_shapes(out);
  return out;
}

std::vector<std::pair<int64_t, int64_t>> PlanSpace::expert_layouts(int64_t tp, int64_t cp,
                                                                   int64_t dp) const {
  const auto& m = job_.model;
  const auto& o = options_;
  if (!m.has_moe()) return {{1, 0}};
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto eps = divisors(m.moe().num_experts());
  if (o.etp.empty()) {  // unfolded: ep from dp x cp, experts split by tp
    for (int64_t ep : eps)
      if (allowed(o.ep, ep) && (dp * cp) % ep == 0) out.emplace_back(ep, 0);
  }
  std::vector<int64_t> etps = o.etp;
  if (etps.empty()) etps = tp > 1 ? std::vector<int64_t>{1, tp} : std::vector<int64_t>{1};
  for (int64_t etp : etps) {
    for (int64_t ep : eps) {
      if (!allowed(o.ep, ep) || (tp * cp * dp) % (ep * etp) != 0) continue;
      // With tp 1 and ep inside dp x cp, folding at etp 1 is the unfolded plan again.
      if (o.etp.empty() && tp == 1 && etp == 1 && (dp * cp) % ep == 0) continue;
      out.emplace_back(ep, etp);
    }
  }
  return out;
}

void PlanSpace::staged_shapes(std::vector<Shape>& out) const {
  const auto& m = job_.model;
  const auto& o = options_;
  const int64_t seq = job_.base.job().seq_len();
  const int64_t layers = m.num_layers();
  // Per-stage degrees need cp = ep = vp = 1 (plan::resolve_plan's stage-degrees-need-uniform).
  if (!allowed(o.cp, 1) || !allowed(o.ep, 1) || !allowed(o.vp, 1)) return;
  // TP degrees a stage of `devices` devices may use, and fits the model's shapes.
  auto tps_for = [&](int64_t devices) {
    std::vector<int64_t> tps;
    for (int64_t tp : divisors(devices)) {
      if (!allowed(o.tp, tp) || (!o.tp_across_nvlink && o.tp.empty() && tp > domain_)) continue;
      models::ShardContext ctx;
      ctx.seq_len = seq, ctx.tp = tp, ctx.sequence_parallel = tp > 1;
      if (models::shard_problem(m, ctx).empty()) tps.push_back(tp);
    }
    return tps;
  };
  std::vector<size_t> order(groups_.size());
  std::iota(order.begin(), order.end(), 0);
  do {
    // Stages per group (in pipeline order): every group hosts at least one stage and splits its
    // devices evenly over its stages.
    std::vector<std::vector<int64_t>> counts_per_group;
    for (size_t i : order) counts_per_group.push_back(divisors(groups_[i].devices));
    std::vector<size_t> pick(order.size(), 0);
    while (true) {
      int64_t pp = 0;
      for (size_t g = 0; g < order.size(); ++g) pp += counts_per_group[g][pick[g]];
      const bool bounded = o.pp.empty() ? pp <= o.max_stage_degrees_pp : allowed(o.pp, pp);
      if (pp <= layers && bounded) {
        // Every combination of a tp per group; the stages of one group share their degrees.
        std::vector<std::vector<int64_t>> tps;
        for (size_t g = 0; g < order.size(); ++g)
          tps.push_back(tps_for(groups_[order[g]].devices / counts_per_group[g][pick[g]]));
        std::vector<size_t> t(order.size(), 0);
        bool any = std::all_of(tps.begin(), tps.end(), [](const auto& v) { return !v.empty(); });
        while (any) {
          Shape s;
          s.pp = pp;
          for (size_t g = 0; g < order.size(); ++g) {
            const int64_t n = counts_per_group[g][pick[g]];
            const int64_t tp = tps[g][t[g]], dp = groups_[order[g]].devices / n / tp;
            for (int64_t i = 0; i < n; ++i) {
              s.stage_groups.push_back(groups_[order[g]].name);
              s.stage_tp.push_back(tp);
              s.stage_dp.push_back(dp);
            }
          }
          // The pipeline micro-batch is micro_batch x dp sequences with dp the largest stage dp,
          // which every stage's dp must divide; uniform degrees are the shapes above.
          s.tp = s.stage_tp.front();
          s.dp = *std::max_element(s.stage_dp.begin(), s.stage_dp.end());
          const bool divides = std::all_of(s.stage_dp.begin(), s.stage_dp.end(),
                                           [&](int64_t d) { return s.dp % d == 0; });
          const bool uniform = std::adjacent_find(s.stage_tp.begin(), s.stage_tp.end(),
                                                  std::not_equal_to<>()) == s.stage_tp.end() &&
                               std::adjacent_find(s.stage_dp.begin(), s.stage_dp.end(),
                                                  std::not_equal_to<>()) == s.stage_dp.end();
          if (divides && !uniform) out.push_back(std::move(s));
          size_t g = 0;
          while (g < t.size() && ++t[g] == tps[g].size()) t[g++] = 0;
          if (g == t.size()) break;
        }
      }
      size_t g = 0;
      while (g < pick.size() && ++pick[g] == counts_per_group[g].size()) pick[g++] = 0;
      if (g == pick.size()) break;
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

std::vector<int64_t> PlanSpace::micro_batches(const Shape& s) const {
  const int64_t gbs = job_.base.job().global_batch_size();
  std::vector<int64_t> out;
  if (gbs % s.dp != 0) return out;
  for (int64_t mbs : divisors(gbs / s.dp)) {
    // An explicit micro-batch list is searched as given (max_micro_batch bounds only the default).
    if (options_.micro_batch.empty() ? mbs > options_.max_micro_batch
                                     : !allowed(options_.micro_batch, mbs))
      continue;
    if (s.vp > 1 && (gbs / (s.dp * mbs)) % s.pp != 0) continue;
    out.push_back(mbs);
  }
  return out;
}

Knobs PlanSpace::seed(const Shape& s, int64_t micro_batch, pb::Sharding sharding,
                      int64_t shard_group, pb::Recompute recompute) const {
  Knobs k;
  k.tp = s.tp, k.pp = s.pp, k.dp = s.dp, k.cp = s.cp, k.ep = s.ep, k.vp = s.vp, k.etp = s.etp;
  k.stage_groups = s.stage_groups;
  k.stage_tp = s.stage_tp, k.stage_dp = s.stage_dp;
  k.sp =
      s.stage_tp.empty() ? s.tp > 1 : *std::max_element(s.stage_tp.begin(), s.stage_tp.end()) > 1;
  k.tp_overlap = k.sp && (s.stage_tp.empty() ? s.tp : s.stage_tp.front()) > 1;
  k.micro_batch = micro_batch;
  k.schedule =
      s.vp > 1 ? pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B
               : (s.pp > 1 ? pb::PIPELINE_SCHEDULE_ONE_F_ONE_B : pb::PIPELINE_SCHEDULE_UNSPECIFIED);
  k.sharding = sharding;
  k.shard_group = sharding == pb::SHARDING_HSDP ? shard_group : 0;
  k.recompute = recompute;
  k.balanced_split =
      s.pp > 1 && (job_.model.num_layers() % (s.pp * s.vp) != 0 || !s.stage_groups.empty());
  return k;
}

std::vector<Knobs> PlanSpace::settings(const Shape& s) const {
  const auto& o = options_;
  std::vector<Knobs> out;
  std::vector<pb::PipelineSchedule> schedules = {pb::PIPELINE_SCHEDULE_UNSPECIFIED};
  if (s.pp > 1 && s.vp > 1) schedules = {pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B};
  if (s.pp > 1 && s.vp == 1) {
    schedules.clear();
    for (auto sc : o.schedules) {
      if (sc != pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) schedules.push_back(sc);
    }
  }
  const bool even_possible = s.stage_groups.empty() && job_.model.num_layers() % (s.pp * s.vp) == 0;
  std::vector<bool> splits = {!even_possible};
  if (even_possible && s.pp > 1 && s.vp == 1) splits = {false, true};
  // Placements that order the dimensions of degree > 1 alike place every rank alike: keep one.
  std::vector<std::string> placements;
  std::set<std::string> seen;
  const Knobs degrees = seed(s, 1, pb::SHARDING_NONE, 0, pb::RECOMPUTE_NONE);
  for (const auto& placement : o.placements) {
    const std::string order = effective_placement(placement, degrees);
    // Per-stage degrees keep each stage's ranks together: pp outermost.
    if (!s.stage_tp.empty() && order.size() >= 3 && order.substr(order.size() - 3) != "pp,")
      continue;
    if (seen.insert(order).second) placements.push_back(placement);
  }
  const bool any_tp = degrees.sp;
  std::vector<bool> sps = {any_tp};
  if (any_tp && o.sp_both_ways) sps = {true, false};
  for (int64_t mbs : micro_batches(s)) {
    for (bool sp : sps) {
      for (auto schedule : schedules) {
        for (auto sharding : o.sharding) {
          if (sharding != pb::SHARDING_NONE && s.dp == 1) continue;
          if (sharding == pb::SHARDING_HSDP && !s.stage_tp.empty()) continue;
          std::vector<int64_t> groups = {0};
          if (sharding == pb::SHARDING_HSDP) groups = hsdp_groups(s.dp);
          for (int64_t g : groups) {
            for (auto recompute : o.recompute) {
              for (const auto& placement : placements) {
                for (double bucket : o.bucket_bytes) {
                  if (bucket != o.bucket_bytes.front() && s.dp * s.cp == 1) continue;
                  for (bool split : splits) {
                    Knobs k = seed(s, mbs, sharding, g, recompute);
                    k.sp = sp;
                    k.tp_overlap = k.tp_overlap && sp;
                    k.schedule = schedule;
                    k.placement = placement;
                    k.bucket_bytes = bucket;
                    k.balanced_split = split;
                    // TP communication overlap is a setting of its own: also without it; and
                    // the MoE all-to-all overlap also with it, where it is allowed.
                    std::vector<Knobs> variants = {k};
                    if (k.tp_overlap) variants.push_back(k), variants.back().tp_overlap = false;
                    for (size_t v = 0, n = variants.size(); v < n; ++v) {
                      if (!a2a_overlap_allowed(variants[v])) continue;
                      variants.push_back(variants[v]);
                      variants.back().a2a_overlap = true;
                    }
                    for (auto& v : variants) out.push_back(std::move(v));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::vector<int64_t> PlanSpace::layer_split(const Knobs& k) const {
  if (k.pp == 1 || !k.balanced_split) return {};
  ORRERY_CHECK(k.vp == 1, "balanced layer splits are made for vp = 1 only");
  const auto key = std::make_tuple(k.pp, k.stage_groups, k.stage_tp, k.stage_dp);
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->splits.find(key);
    if (it != cache_->splits.end()) return it->second;
  }
  std::vector<double> speed(static_cast<size_t>(k.pp), 1.0), extra(static_cast<size_t>(k.pp), 0.0);
  for (size_t s = 0; s < k.stage_groups.size(); ++s) {
    for (const auto& g : groups_) {
      if (g.name == k.stage_groups[s]) speed[s] = g.speed;
    }
    // Stages with their own degrees differ in device count too: a stage's speed is its devices'
    // peak times how many it has (tp x dp; every stage processes the whole pipeline micro-batch).
    if (!k.stage_tp.empty()) speed[s] *= static_cast<double>(k.stage_tp[s] * k.stage_dp[s]);
  }
  extra.front() += embed_cost_;
  extra.back() += head_cost_;
  auto split = partition_layers(layer_cost_, extra, speed);
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->splits.emplace(key, split);
  return split;
}

bool PlanSpace::a2a_overlap_allowed(const Knobs& k) const {
  return job_.model.has_moe() && k.ep > 1 &&
         (k.pp == 1 || k.schedule == pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B) &&
         k.recompute != pb::RECOMPUTE_FULL && !plan::shards_parameters(k.sharding);
}

pb::Plan PlanSpace::plan(const Knobs& k) const {
  pb::Plan p = job_.base;
  auto* par = p.mutable_parallel();
  if (k.stage_tp.empty()) {
    par->set_tp(k.tp);
  } else {
    par->clear_tp();  // stage_tp gives every stage's (sim's stage-tp-replaces-tp)
  }
  par->set_pp(k.pp);
  par->set_dp(k.dp);
  par->set_cp(k.cp);
  if (k.ep > 1) par->set_ep(k.ep);
  if (k.etp > 0) par->set_etp(k.etp);
  if (k.vp > 1) par->set_vp(k.vp);
  par->set_sequence_parallel(k.sp);
  par->set_schedule(k.schedule);
  p.set_sharding(k.sharding);
  if (k.sharding == pb::SHARDING_HSDP) p.set_shard_group_size(k.shard_group);
  if (plan::shards_parameters(k.sharding)) p.set_prefetch_buckets(1);
  p.set_bucket_bytes(k.bucket_bytes);
  p.set_recompute(k.recompute);
  // recompute_every is searched (Knobs::recompute_every); Megatron's module lists are not (a
  // selective candidate recomputes its attention core).
  p.clear_recompute_every();
  if (k.recompute == pb::RECOMPUTE_FULL && k.recompute_every > 1)
    p.set_recompute_every(k.recompute_every);
  p.clear_recompute_modules();
  // Searched (Knobs::a2a_overlap): the plan file's value does not ride along.
  p.set_moe_a2a_overlap(k.a2a_overlap);
  p.set_micro_batch_size(k.micro_batch);
  p.set_placement_order(k.placement);
  p.clear_layers_per_stage();
  for (int64_t n : layer_split(k)) p.add_layers_per_stage(n);
  p.clear_stage_node_groups();
  for (const auto& g : k.stage_groups) p.add_stage_node_groups(g);
  p.clear_stage_tp();
  p.clear_stage_dp();
  for (int64_t v : k.stage_tp) p.add_stage_tp(v);
  for (int64_t v : k.stage_dp) p.add_stage_dp(v);
  const bool reduces = k.dp * k.cp > 1 && !plan::shards_parameters(k.sharding);
  p.set_overlap_grad_reduce(k.overlap && reduces);
  p.set_overlap_param_gather(
      k.overlap && (k.sharding == pb::SHARDING_ZERO1 || k.sharding == pb::SHARDING_ZERO2));
  p.set_tp_comm_overlap(k.tp_overlap);
  return p;
}

std::string knob_key(const Knobs& k) {
  std::string s =
      "tp" + std::to_string(k.tp) + " pp" + std::to_string(k.pp) + " dp" + std::to_string(k.dp) +
      " cp" + std::to_string(k.cp) + " ep" + std::to_string(k.ep) + " vp" + std::to_string(k.vp) +
      (k.sp ? " sp" : "") + " mbs" + std::to_string(k.micro_batch) + " sched" +
      std::to_string(static_cast<int>(k.schedule)) + " shard" +
      std::to_string(static_cast<int>(k.sharding)) + "/" + std::to_string(k.shard_group) + " rc" +
      std::to_string(static_cast<int>(k.recompute)) +
      (k.recompute_every > 1 ? "/" + std::to_string(k.recompute_every) : "") + " bucket" +
      std::to_string(static_cast<int64_t>(k.bucket_bytes)) + " place[" + k.placement + "]";
  for (const auto& g : k.stage_groups) s += " " + g;
  if (!k.stage_tp.empty()) {
    s += " stp";
    for (int64_t v : k.stage_tp) s += "," + std::to_string(v);
    s += " sdp";
    for (int64_t v : k.stage_dp) s += "," + std::to_string(v);
  }
  if (k.balanced_split) s += " balanced";
  if (!k.overlap) s += " no-overlap";
  if (k.tp_overlap) s += " tp-overlap";
  if (k.a2a_overlap) s += " a2a-overlap";
  if (k.etp > 0) s += " etp" + std::to_string(k.etp);
  return s;
}

}  // namespace orrery::planner
