#include "sharding_parts.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <utility>

#include "op_trace.hpp"
#include "orrery/base/error.hpp"
#include "orrery/executor/data_parallel.hpp"
#include "orrery/plan/buckets.hpp"
#include "orrery/plan/rank_layout.hpp"
#include "orrery/plan/resolved_plan.hpp"

namespace orrery::executor {

std::string parameter_part(const std::string& name) {
  if (name.rfind("head.", 0) == 0) return "head";
  if (name.rfind("embed.", 0) == 0) return "embed";
  if (name.rfind("layers.", 0) == 0) {
    const size_t end = name.find('.', 7);
    return "L" + name.substr(7, end == std::string::npos ? std::string::npos : end - 7);
  }
  throw base::InternalError("parameter " + name +
                            " belongs to no part of the model (embed, layers.<i>, head)");
}

int64_t part_order(const std::string& part) {
  if (part == "embed") return -1;
  if (part == "head") return INT64_MAX;
  return std::stoll(part.substr(1));
}

std::vector<ModelPart> parts_of(const std::vector<ShardedParam>& params,
                                const std::function<bool(const ShardedParam&)>& keep) {
  std::vector<ModelPart> parts;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) {
    const ShardedParam& p = params[i];
    // A pipeline stage's copy of the tied embedding is in no part (data_parallel.hpp).
    if (p.pipeline_copy || !keep(p)) continue;
    const std::string name = parameter_part(p.name);
    auto [it, added] = index.emplace(name, parts.size());
    if (added) {
      ModelPart part;
      part.name = name;
      part.layer = name[0] == 'L' ? part_order(name) : -1;
      parts.push_back(part);
    }
    ModelPart& part = parts[it->second];
    part.params.push_back(i);
    part.numel += p.tensor.numel();
  }
  std::stable_sort(parts.begin(), parts.end(), [](const ModelPart& a, const ModelPart& b) {
    return part_order(a.name) < part_order(b.name);
  });
  return parts;
}

std::vector<ModelPart> model_parts(const std::vector<ShardedParam>& params, bool experts) {
  return parts_of(params, [experts](const ShardedParam& p) { return p.expert == experts; });
}

std::vector<GradBucket> gradient_buckets(const std::vector<ModelPart>& parts, double bucket_params,
                                         const std::string& group_name, bool reduce_scatter) {
  std::vector<double> sizes;  // backward order
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) sizes.push_back(it->numel);
  std::vector<GradBucket> out;
  for (const auto& run : plan::gradient_buckets(sizes, bucket_params)) {
    GradBucket b;
    b.name = "opt." + group_name + ".bucket" + std::to_string(out.size()) + "." +
             (reduce_scatter ? "reduce_scatter" : "all_reduce");
    for (size_t j : run) {
      const size_t forward = parts.size() - 1 - j;
      b.parts.push_back(forward);
      b.numel += parts[forward].numel;
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<std::vector<size_t>> fsdp_buckets(const std::vector<ModelPart>& parts,
                                              const pb::Plan& plan) {
  std::vector<double> sizes;
  for (const auto& p : parts) sizes.push_back(p.numel);
  // FSDP buckets are measured in gathered bytes: the lowering's param_bytes (fp32 runs gather
  // their fp32 weights, every other precision a 2-byte compute copy).
  const double limit =
      plan.bucket_bytes() > 0
          ? plan.bucket_bytes() / plan::precisions_of(plan.job().precision()).param_bytes
          : 0;
  return plan::gradient_buckets(sizes, limit);
}

std::string fsdp_node_name(const ModelPart& part, int64_t micro_batch, const char* phase,
                           const std::string& op) {
  return part.layer >= 0 ? site_name(part.layer, micro_batch, phase, op)
                         : site_name(-1, micro_batch, phase, part.name + "." + op);
}

// ---- Layout query (data_parallel.hpp) ----

namespace {

// Rank `rank`'s parameters as its model shard holds them, built without process groups. Without
// an EP group the model keeps every routed expert: only this EP rank's are kept.
std::vector<ShardedParam> rank_parameters(const TrainConfig& c, const plan::RankLayout& grid,
                                          int64_t rank) {
  const plan::RankCoord coord = grid.coord(rank);
  const StageLayers stage =
      stage_layers_of(layers_per_stage(c.plan, c.model), grid.degrees().pp, coord.pp);
  ExpertParallel ep;
  ep.size = grid.degrees().ep;
  const auto ep_members = grid.group(plan::GroupKind::kEp, rank);
  ep.rank = std::find(ep_members.begin(), ep_members.end(), rank) - ep_members.begin();
  const Transformer model(c.model, GroupPtr(), grid.degrees().tp, coord.tp, c.seed, stage,
                          c.plan.parallel().sequence_parallel(), ep);
  std::set<std::string> foreign;
  for (const auto& m : model.all_parameters()) {
    if (m.expert >= 0 && ep.size > 1 && expert_owner(c.model, ep.size, m.expert) != ep.rank) {
      foreign.insert(m.name);
    }
  }
  std::vector<ShardedParam> params;
  for (const auto& p : model.parameters()) {
    if (foreign.count(p.name) == 0) params.push_back(p);
  }
  return params;
}

DataParallelCollective collective(const std::string& name,
                                  const std::vector<const ModelPart*>& parts) {
  DataParallelCollective d;
  d.name = name;
  for (const ModelPart* p : parts) {
    d.parts.push_back(p->name);
    d.params += p->numel;
  }
  return d;
}

// FSDP: the first micro-batch's forward gather of each bucket.
std::vector<DataParallelCollective> fsdp_collectives(const std::vector<ShardedParam>& params,
                                                     const pb::Plan& plan) {
  std::vector<DataParallelCollective> out;
  const auto parts = parts_of(params, [](const ShardedParam&) { return true; });
  for (const auto& run : fsdp_buckets(parts, plan)) {
    std::vector<const ModelPart*> members;
    for (size_t i : run) members.push_back(&parts[i]);
    out.push_back(
        collective(fsdp_node_name(parts[run.front()], 0, "fwd", "fsdp.all_gather"), members));
  }
  return out;
}

// HSDP: FSDP's gathers over the shard group, then the replica all-reduce of this rank's chunks
// (the parameters over the shard group's size, unpadded, as the lowering counts them).
std::vector<DataParallelCollective> hsdp_collectives(const std::vector<ShardedParam>& params,
                                                     const pb::Plan& plan,
                                                     const plan::RankLayout& grid, int64_t rank) {
  const auto shard = static_cast<int64_t>(grid.group(plan::GroupKind::kDpShard, rank).size());
  const auto replicas = grid.group(plan::GroupKind::kDpReplica, rank).size();
  std::vector<DataParallelCollective> out;
  if (shard > 1) out = fsdp_collectives(params, plan);
  if (replicas > 1) {
    const auto parts = parts_of(params, [](const ShardedParam&) { return true; });
    std::vector<const ModelPart*> members;
    for (const auto& p : parts) members.push_back(&p);
    out.push_back(collective("opt.hsdp.replica_all_reduce", members));
    out.back().params = (out.back().params + shard / 2) / shard;
  }
  return out;
}

// ZeRO's parameter gathers: every part's, in forward order, dense before experts.
void append_zero_gathers(const std::vector<std::pair<bool, std::vector<ModelPart>>>& subsets,
                         std::vector<DataParallelCollective>& out) {
  std::vector<std::pair<std::pair<int64_t, bool>, DataParallelCollective>> gathers;
  for (const auto& [experts, parts] : subsets) {
    for (const auto& p : parts) {
      const std::string name =
          "opt." + p.name + (experts ? ".expert_param_all_gather" : ".param_all_gather");
      gathers.push_back({{part_order(p.name), experts}, collective(name, {&p})});
    }
  }
  std::stable_sort(gathers.begin(), gathers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& g : gathers) out.push_back(std::move(g.second));
}

}  // namespace

std::vector<DataParallelCollective> data_parallel_collectives(const TrainConfig& c, int64_t rank) {
  const plan::RankLayout grid = plan::layout_of(c.plan);
  const std::vector<ShardedParam> params = rank_parameters(c, grid, rank);
  const auto sharding = c.plan.sharding();
  const int64_t dp = grid.degrees().dp;
  // Dense gradients are reduced (and FSDP shards them) over every replica of the weights: the dp
  // x cp ranks (CP ranks hold the same weights and see other tokens).
  const int64_t replicas = dp * grid.degrees().cp;
  if (sharding == pb::SHARDING_ZERO3 || sharding == pb::SHARDING_FSDP) {
    return replicas < 2 ? std::vector<DataParallelCollective>{} : fsdp_collectives(params, c.plan);
  }
  if (sharding == pb::SHARDING_HSDP) return hsdp_collectives(params, c.plan, grid, rank);
  const bool zero = sharding == pb::SHARDING_ZERO1 || sharding == pb::SHARDING_ZERO2;
  const double bucket_params = plan::gradient_bucket_params(
      c.plan, dp, plan::precisions_of(c.plan.job().precision()).grad_bytes);
  const int64_t edp = static_cast<int64_t>(grid.group(plan::GroupKind::kEdp, rank).size());
  std::vector<DataParallelCollective> out;
  std::vector<std::pair<bool, std::vector<ModelPart>>> subsets;
  for (const bool experts : {false, true}) {
    if ((experts ? edp : replicas) < 2) continue;
    auto parts = model_parts(params, experts);
    for (const auto& b : gradient_buckets(parts, bucket_params, experts ? "edp" : "dp", zero)) {
      std::vector<const ModelPart*> members;
      for (size_t i : b.parts) members.push_back(&parts[i]);
      out.push_back(collective(b.name, members));
    }
    subsets.emplace_back(experts, std::move(parts));
  }
  if (zero) append_zero_gathers(subsets, out);
  return out;
}

}  // namespace orrery::executor
