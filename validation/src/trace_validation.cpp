// validate_trace (see trace_validation.hpp).
#include "orrery/validation/trace_validation.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "orrery/base/error.hpp"
#include "orrery/calibration/skew_count.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::validation {
namespace {

constexpr int kSendKey = 100, kRecvKey = 101;

std::string op_class_name(pb::OpClass c) {
  return enum_value_name(*pb::OpClass_descriptor()->FindValueByNumber(c));
}
std::string collective_name(pb::CollectiveKind k) {
  return enum_value_name(*pb::CollectiveKind_descriptor()->FindValueByNumber(k));
}

void require(bool present, const std::string& file, const std::string& field) {
  if (present) return;
  throw base::InputError(
      file, 0, field,
      "missing: validate --trace needs a measured run's trace (`orrery run --out DIR` writes "
      "DIR/trace.json, which carries the plan, model and cluster it ran and its measured step "
      "time)");
}

std::string path(size_t r, int i) {
  return "ranks[" + std::to_string(r) + "].nodes[" + std::to_string(i) + "]";
}

// The measured rank's nodes against the lowering's, by id; throws at the first difference.
void match(const pb::RankGraph& measured, size_t r, const pb::RankGraph& predicted,
           const std::string& file) {
  std::map<int64_t, int> by_id;
  for (int i = 0; i < measured.nodes_size(); ++i) {
    if (!by_id.emplace(measured.nodes(i).id(), i).second) {
      throw base::InputError(file, 0, path(r, i) + ".id",
                             "node id " + std::to_string(measured.nodes(i).id()) +
                                 " appears twice on rank " + std::to_string(measured.rank()));
    }
  }
  std::set<int64_t> lowered;
  for (const auto& p : predicted.nodes()) {
    lowered.insert(p.id());
    const auto it = by_id.find(p.id());
    if (it == by_id.end()) {
      throw base::InputError(
          file, 0, "ranks[" + std::to_string(r) + "].nodes",
          "rank " + std::to_string(measured.rank()) + " has no node " + std::to_string(p.id()) +
              " '" + p.name() +
              "', which the lowering of the trace's plan has: the executor and the simulator "
              "disagree about what the plan runs");
    }
    const pb::ExecNode& m = measured.nodes(it->second);
    if (m.name() != p.name()) {
      throw base::InputError(file, 0, path(r, it->second) + ".name",
                             "node " + std::to_string(p.id()) + " of rank " +
                                 std::to_string(measured.rank()) + " is '" + m.name() +
                                 "' in the trace but '" + p.name() +
                                 "' in the lowering of its plan");
    }
    if (!m.has_duration_s()) {
      throw base::InputError(file, 0, path(r, it->second) + ".duration_s",
                             "missing: node '" + m.name() + "' was not timed");
    }
  }
  for (int i = 0; i < measured.nodes_size(); ++i) {
    if (!lowered.count(measured.nodes(i).id())) {
      throw base::InputError(
          file, 0, path(r, i),
          "node " + std::to_string(measured.nodes(i).id()) + " '" + measured.nodes(i).name() +
              "' is not in the lowering of the trace's plan: the executor and the "
              "simulator disagree "
              "about what the plan runs");
    }
  }
}

const pb::ProcessGroup& group_of(const pb::ExecGraph& lowered, int64_t id) {
  for (const auto& g : lowered.process_groups()) {
    if (g.id() == id) return g;
  }
  ORRERY_CHECK(
      false, "the lowering references process group " + std::to_string(id) + " it does not define");
}

// What the engines charge a node when it runs alone; `sharing` is the rank's
// CostModels::host_sharing.
double predicted_seconds(const pb::ExecNode& n, int64_t rank, const plan::ResolvedPlan& plan,
                         const pb::ExecGraph& lowered, const sim::CostModels& costs,
                         double sharing) {
  const int64_t device = plan.device_of_rank[static_cast<size_t>(rank)];
  switch (n.kind()) {
    case pb::NODE_KIND_COMPUTE:
      return sharing * costs.compute().seconds(plan::device_of(plan, rank), n);
    case pb::NODE_KIND_COLLECTIVE: {
      std::vector<int64_t> devices;
      for (int64_t r : group_of(lowered, n.process_group()).ranks())
        devices.push_back(plan.device_of_rank[static_cast<size_t>(r)]);
      const double blocking = plan::is_blocking_collective(n)
                                  ? costs.collectives().blocking_overhead_s(n.collective(), devices)
                                  : 0;
      return costs.collectives().estimate(n.collective(), devices, n.comm_bytes()).seconds +
             blocking;
    }
    default: {
      const int64_t peer = plan.device_of_rank[static_cast<size_t>(n.peer())];
      return n.kind() == pb::NODE_KIND_SEND
                 ? costs.collectives().p2p_seconds(device, peer, n.comm_bytes())
                 : costs.collectives().p2p_seconds(peer, device, n.comm_bytes());
    }
  }
}

std::vector<GroupComparison> summarise(
    const std::map<int, std::vector<const NodeComparison*>>& groups) {
  std::vector<GroupComparison> out;
  for (const auto& [key, nodes] : groups) {
    GroupComparison g;
    g.name = nodes.front()->group;
    g.nodes = static_cast<int64_t>(nodes.size());
    std::vector<double> errors;
    for (const NodeComparison* n : nodes) {
      g.measured_s += n->measured_s;
      g.predicted_s += n->predicted_s;
      if (n->measured_s > 0) errors.push_back(std::abs(n->predicted_s / n->measured_s - 1));
    }
    g.error = g.measured_s > 0 ? g.predicted_s / g.measured_s - 1 : 0;
    if (!errors.empty()) {
      std::sort(errors.begin(), errors.end());
      const size_t m = errors.size();
      g.median_abs_error = m % 2 == 1 ? errors[m / 2] : 0.5 * (errors[m / 2 - 1] + errors[m / 2]);
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

TraceValidation validate_trace(const pb::ExecGraph& trace, const std::string& file,
                               sim::EngineKind engine, const pb::CalibrationProfile* calibration) {
  require(trace.has_plan(), file, "plan");
  require(trace.has_model_spec(), file, "model_spec");
  require(trace.has_cluster_spec(), file, "cluster_spec");
  require(trace.measured_step_s() > 0, file, "measured_step_s");
  const plan::ResolvedPlan plan =
      plan::resolve_plan(trace.plan(), trace.model_spec(), trace.cluster_spec(), SourceMap(file));
  const topologies::Topology topology(plan.cluster);
  const sim::CostModels costs(topology, plan.precision.dtype, calibration);

  std::vector<int64_t> ranks;
  for (size_t r = 0; r < static_cast<size_t>(trace.ranks_size()); ++r) {
    const int64_t rank = trace.ranks(static_cast<int>(r)).rank();
    if (rank < 0 || rank >= plan.world_size() || std::count(ranks.begin(), ranks.end(), rank)) {
      throw base::InputError(file, 0, "ranks[" + std::to_string(r) + "].rank",
                             "got " + std::to_string(rank) + ": the plan has ranks 0.." +
                                 std::to_string(plan.world_size() - 1) + ", each listed once");
    }
    ranks.push_back(rank);
  }
  if (ranks.empty()) throw base::InputError(file, 0, "ranks", "missing: the trace has no ranks");
  plan::LowerOptions options;
  options.ranks = ranks;
  const pb::ExecGraph lowered = plan::lower(plan, options);
  std::map<int64_t, const pb::RankGraph*> lowered_rank;
  for (const auto& rg : lowered.ranks()) lowered_rank[rg.rank()] = &rg;

  TraceValidation v;
  v.engine = engine;
  v.ranks = static_cast<int64_t>(ranks.size());
  // Each node's group: its op class (compute) or collective kind (then send, recv).
  std::vector<std::pair<bool, int>> keys;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const pb::RankGraph& measured = trace.ranks(static_cast<int>(r));
    const pb::RankGraph& predicted = *lowered_rank.at(measured.rank());
    match(measured, r, predicted, file);
    std::map<int64_t, const pb::ExecNode*> timed;
    for (const auto& n : measured.nodes()) timed[n.id()] = &n;
    // A collective's prediction includes the expected wait for its group's slowest member after
    // the predicted compute since the rank last waited on the group (skew_count.hpp), as the
    // measured time includes the real one.
    const pb::DeviceSpec& device = plan::device_of(plan, measured.rank());
    const double sharing = costs.host_sharing(plan, measured.rank());
    const std::vector<double> since = calibration::detail::compute_since_group_wait(
        measured,
        [&](const pb::ExecNode& n) { return sharing * costs.compute().seconds(device, n); });
    std::map<int64_t, double> since_by_id;
    for (int i = 0; i < measured.nodes_size(); ++i)
      since_by_id[measured.nodes(i).id()] = since[static_cast<size_t>(i)];
    for (const auto& p : predicted.nodes()) {
      NodeComparison c;
      c.rank = measured.rank();
      c.id = p.id();
      c.name = p.name();
      switch (p.kind()) {
        case pb::NODE_KIND_COMPUTE:
          c.group = op_class_name(p.op_class());
          keys.emplace_back(true, p.op_class());
          break;
        case pb::NODE_KIND_COLLECTIVE:
          c.group = collective_name(p.collective());
          keys.emplace_back(false, p.collective());
          break;
        default:
          c.group = p.kind() == pb::NODE_KIND_SEND ? "send" : "recv";
          keys.emplace_back(false, p.kind() == pb::NODE_KIND_SEND ? kSendKey : kRecvKey);
          break;
      }
      c.measured_s = timed.at(p.id())->duration_s();
      c.predicted_s = predicted_seconds(p, measured.rank(), plan, lowered, costs, sharing);
      if (p.kind() == pb::NODE_KIND_COLLECTIVE && since_by_id.at(p.id()) > 0) {
        c.predicted_s += costs.compute().skew_wait_s(
            device, group_of(lowered, p.process_group()).ranks_size(), since_by_id.at(p.id()));
      }
      v.nodes.push_back(std::move(c));
    }
  }
  std::map<int, std::vector<const NodeComparison*>> by_class, by_collective;
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    (keys[i].first ? by_class : by_collective)[keys[i].second].push_back(&v.nodes[i]);
  }
  v.op_classes = summarise(by_class);
  v.collectives = summarise(by_collective);

  v.measured_step_s = trace.measured_step_s();
  sim::DesOptions des;
  des.all_ranks = true;  // the measured run's every rank, for the timeline (des only)
  sim::SimOutput out = sim::simulate(plan, costs, engine, des);
  v.predicted_step_s = out.result.step_time_s();
  v.predicted_timeline = std::move(out.timeline);
  v.step_error = v.predicted_step_s / v.measured_step_s - 1;
  return v;
}

}  // namespace orrery::validation
