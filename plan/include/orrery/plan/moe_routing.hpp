// Where an MoE plan's routed tokens can go: the nodes an EP group spans and, under group-limited
// routing (MoeSpec.n_group / topk_group, DeepSeek-V2/V3), how many of them one token can reach.
#pragma once

#include <cstdint>

#include "orrery/plan/resolved_plan.hpp"

namespace orrery::plan {

// Index of the node `rank`'s device sits in (nodes numbered in node-group order).
int64_t node_of(const ResolvedPlan& plan, int64_t rank);

// Distinct nodes of rank 0's EP group (1 without expert parallelism).
int64_t ep_group_nodes(const ResolvedPlan& plan);

// The most nodes of rank 0's EP group one token's top_k copies can reach, or 0 when routing
// is not group-limited or the group sits on one node. The EP group's rank i holds experts
// [i E / ep, (i + 1) E / ep) and group g the experts [g E / n_group, (g + 1) E / n_group); a
// token picks its experts inside topk_group groups, so it reaches at most the nodes of the
// topk_group groups that span the most nodes, and never more than top_k or the group's nodes.
int64_t ep_node_reach(const ResolvedPlan& plan);

// The nodes of rank 0's EP group one token's top_k experts fall on, expected under uniform
// routing (every set of top_k distinct experts equally likely): the sum over the group's nodes
// of 1 - C(E - E_n, k) / C(E, k), E_n the experts node n holds. 0 when the group sits on one
// node.
double ep_expected_node_reach(const ResolvedPlan& plan);

// Copies of a token the dispatch carries when fewer than top_k (models::ShardContext::
// ep_dispatch_copies), by the plan's moe_dispatcher: alltoall 0 (top_k); deepep the nodes it
// reaches, min(ep_node_reach, ep_expected_node_reach) under group-limited routing, else
// ep_expected_node_reach; absent ep_node_reach (before the field, a token was sent once per node
// only under group-limited routing).
double dispatch_copies(const ResolvedPlan& plan);

}  // namespace orrery::plan
