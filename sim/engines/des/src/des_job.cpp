#include "des_job.hpp"

#include <utility>

namespace orrery::sim::des {
namespace {

void put(const plan::Degrees& d, pb::DesJob::Degrees& out) {
  out.set_tp(d.tp);
  out.set_cp(d.cp);
  out.set_dp(d.dp);
  out.set_pp(d.pp);
  out.set_ep(d.ep);
  out.set_vp(d.vp);
  out.set_etp(d.etp);
}

plan::Degrees get(const pb::DesJob::Degrees& d) {
  return plan::Degrees{d.tp(), d.cp(), d.dp(), d.pp(), d.ep(), d.vp(), d.etp()};
}

void put(const plan::Precisions& p, pb::DesJob::Precisions& out) {
  out.set_activation_bytes(p.activation_bytes);
  out.set_param_bytes(p.param_bytes);
  out.set_grad_bytes(p.grad_bytes);
  out.set_master_param_bytes(p.master_param_bytes);
  out.set_optimizer_state_bytes(p.optimizer_state_bytes);
  out.set_dtype(p.dtype);
  out.set_fp8_recipe(p.fp8_recipe);
  out.set_fp8_attention(p.fp8_attention);
  out.set_fp8_param_gather(p.fp8_param_gather);
  out.set_fp8_recipe_defaulted(p.fp8_recipe_defaulted);
  out.set_grad_reduce_bytes(p.grad_reduce_bytes);
}

plan::Precisions get(const pb::DesJob::Precisions& p) {
  plan::Precisions out;
  out.activation_bytes = p.activation_bytes();
  out.param_bytes = p.param_bytes();
  out.grad_bytes = p.grad_bytes();
  out.master_param_bytes = p.master_param_bytes();
  out.optimizer_state_bytes = p.optimizer_state_bytes();
  out.dtype = p.dtype();
  out.fp8_recipe = p.fp8_recipe();
  out.fp8_attention = p.fp8_attention();
  out.fp8_param_gather = p.fp8_param_gather();
  out.fp8_recipe_defaulted = p.fp8_recipe_defaulted();
  out.grad_reduce_bytes = p.grad_reduce_bytes();
  return out;
}

void put_plan(const plan::ResolvedPlan& plan, pb::DesJob& job) {
  *job.mutable_plan() = plan.plan;
  *job.mutable_model() = plan.model;
  *job.mutable_cluster() = plan.cluster;
  put(plan.degrees, *job.mutable_degrees());
  for (const plan::Degrees& d : plan.stage_degrees) put(d, *job.add_stage_degrees());
  put(plan.precision, *job.mutable_precision());
  job.set_seq_len(plan.seq_len);
  job.set_micro_batch_size(plan.micro_batch_size);
  job.set_num_micro_batches(plan.num_micro_batches);
  for (const int64_t n : plan.layers_per_stage) job.add_layers_per_stage(n);
  for (const plan::Dim d : plan.placement) job.add_placement(static_cast<int32_t>(d));
  for (const int64_t d : plan.device_of_rank) job.add_device_of_rank(d);
}

plan::ResolvedPlan get_plan(const pb::DesJob& job) {
  plan::ResolvedPlan out;
  out.plan = job.plan();
  out.model = job.model();
  out.cluster = job.cluster();
  out.degrees = get(job.degrees());
  for (const auto& d : job.stage_degrees()) out.stage_degrees.push_back(get(d));
  out.precision = get(job.precision());
  out.seq_len = job.seq_len();
  out.micro_batch_size = job.micro_batch_size();
  out.num_micro_batches = job.num_micro_batches();
  out.layers_per_stage.assign(job.layers_per_stage().begin(), job.layers_per_stage().end());
  for (const int32_t d : job.placement()) out.placement.push_back(static_cast<plan::Dim>(d));
  out.device_of_rank.assign(job.device_of_rank().begin(), job.device_of_rank().end());
  return out;
}

}  // namespace

pb::DesJob to_job(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options) {
  pb::DesJob job;
  put_plan(plan, job);
  *job.mutable_topology() = costs.topology().spec();
  job.set_cost_dtype(costs.compute().dtype());
  if (costs.calibration() != nullptr) *job.mutable_calibration() = *costs.calibration();
  job.set_all_ranks(options.all_ranks);
  job.set_fold_cp(options.fold_cp);
  job.set_node_by_node(!options.chain_compute);
  if (options.graph != nullptr) *job.mutable_graph() = *options.graph;
  job.set_timeline(options.timeline);
  job.set_max_nodes(options.max_nodes);
  job.set_memory_limit_bytes(options.memory_limit_bytes);
  return job;
}

RebuiltJob::RebuiltJob(pb::DesJob j) : job(std::move(j)), plan(get_plan(job)) {
  topology = std::make_unique<topologies::Topology>(job.topology());
  costs = std::make_unique<CostModels>(*topology, job.cost_dtype(),
                                       job.has_calibration() ? &job.calibration() : nullptr);
  options.all_ranks = job.all_ranks();
  options.fold_cp = job.fold_cp();
  options.chain_compute = !job.node_by_node();
  options.graph = job.has_graph() ? &job.graph() : nullptr;
  options.timeline = job.timeline();
  options.time_limit_s = 0;  // the caller enforces it
  // The caller checked the budget, except for a symmetric run's: build_model counts the graph
  // it lowers (check_budget).
  options.max_nodes = job.max_nodes();
}

}  // namespace orrery::sim::des
