#include "orrery/plan/moe_routing.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <vector>

#include "orrery/base/error.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::plan {

int64_t node_of(const ResolvedPlan& plan, int64_t rank) {
  int64_t index = plan.device_of_rank.at(static_cast<size_t>(rank));
  int64_t node = 0;
  for (const auto& g : plan.cluster.node_groups()) {
    for (const auto& nt : plan.cluster.node_types()) {
      if (nt.name() != g.node_type()) continue;
      const int64_t n = g.count() * nt.devices_per_node();
      if (index < n) return node + index / nt.devices_per_node();
      index -= n;
      node += g.count();
    }
  }
  ORRERY_CHECK(false, "rank placed beyond the cluster's devices");
}

namespace {

std::vector<int64_t> ep_nodes_in_order(const ResolvedPlan& plan) {
  std::vector<int64_t> out;
  if (plan.degrees.ep < 2) return {node_of(plan, 0)};
  for (int64_t r : rank_layout(plan).group(GroupKind::kEp, 0)) out.push_back(node_of(plan, r));
  return out;
}

}  // namespace

int64_t ep_group_nodes(const ResolvedPlan& plan) {
  const auto nodes = ep_nodes_in_order(plan);
  return static_cast<int64_t>(std::set<int64_t>(nodes.begin(), nodes.end()).size());
}

int64_t ep_node_reach(const ResolvedPlan& plan) {
  if (!plan.model.has_moe() || plan.model.moe().topk_group() == 0) return 0;
  const auto nodes = ep_nodes_in_order(plan);
  const auto spanned = static_cast<int64_t>(std::set<int64_t>(nodes.begin(), nodes.end()).size());
  if (spanned < 2) return 0;
  const auto& moe = plan.model.moe();
  const int64_t experts = moe.num_experts(), ep = plan.degrees.ep;
  const int64_t per_rank = experts / ep, per_group = experts / moe.n_group();
  // Nodes holding each expert group's experts.
  std::vector<int64_t> group_nodes;
  for (int64_t g = 0; g < moe.n_group(); ++g) {
    std::set<int64_t> held;
    for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e)
      held.insert(nodes[static_cast<size_t>(e / per_rank)]);
    group_nodes.push_back(static_cast<int64_t>(held.size()));
  }
  std::sort(group_nodes.begin(), group_nodes.end(), std::greater<>());
  int64_t reach = 0;
  for (int64_t g = 0; g < moe.topk_group(); ++g) reach += group_nodes[static_cast<size_t>(g)];
  return std::min({reach, moe.top_k(), spanned});
}

double ep_expected_node_reach(const ResolvedPlan& plan) {
  if (!plan.model.has_moe() || plan.degrees.ep < 2) return 0;
  const auto nodes = ep_nodes_in_order(plan);
  const std::set<int64_t> spanned(nodes.begin(), nodes.end());
  if (spanned.size() < 2) return 0;
  const auto& moe = plan.model.moe();
  const int64_t experts = moe.num_experts(), k = moe.top_k();
  const int64_t per_rank = experts / plan.degrees.ep;
  double reach = 0;
  for (const int64_t node : spanned) {
    const int64_t held = per_rank * std::count(nodes.begin(), nodes.end(), node);
    // C(E - held, k) / C(E, k) as a product: the chance no expert of this node is picked.
    double missed = 1;
    for (int64_t i = 0; i < k; ++i)
      missed *= static_cast<double>(std::max<int64_t>(experts - held - i, 0)) /
                static_cast<double>(experts - i);
    reach += 1 - missed;
  }
  return reach;
}

double dispatch_copies(const ResolvedPlan& plan) {
  const auto bound = static_cast<double>(ep_node_reach(plan));
  switch (plan.plan.moe_dispatcher()) {
    case pb::MOE_DISPATCHER_ALLTOALL:
      return 0;
    case pb::MOE_DISPATCHER_DEEPEP: {
      const double expected = ep_expected_node_reach(plan);
      return bound > 0 ? std::min(bound, expected) : expected;
    }
    default:
      return bound;
  }
}

}  // namespace orrery::plan
