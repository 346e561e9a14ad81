#include "orrery/plan/plan_defaults.hpp"

#include <algorithm>
#include <string>

#include "orrery/base/error.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::plan {

pb::Precision default_precision(const pb::ClusterSpec& cluster) {
  // One precision for all ranks: a cluster with any CPU device trains as the CPU would.
  for (const auto& type : cluster.node_types()) {
    if (topologies::find_device(cluster, type.device()).kind() == pb::DEVICE_KIND_CPU)
      return pb::PRECISION_FP32;
  }
  return pb::PRECISION_BF16;
}

namespace {

void fill_dp(pb::Plan& p, const pb::ClusterSpec& cluster) {
  auto* q = p.mutable_parallel();
  if (q->has_dp()) return;
  if (p.stage_tp_size() > 0 || p.stage_dp_size() > 0) {
    // Stages with their own degrees do not fill the cluster by one rule: the pipeline
    // micro-batch (micro_batch x dp) must be given, or follow from the stages' dp.
    if (p.stage_dp_size() == 0) {
      throw base::InputError("", 0, "parallel.dp",
                             "required (--dp) with stage_tp and no stage_dp: it sizes the "
                             "pipeline micro-batch");
    }
    q->set_dp(*std::max_element(p.stage_dp().begin(), p.stage_dp().end()));
    return;
  }
  const int64_t devices = topologies::total_devices(cluster);
  const Degrees given = degrees_of(*q);
  const int64_t per_replica = given.tp * given.pp * given.cp;
  if (devices % per_replica != 0) {
    throw base::InputError("", 0, "parallel.dp",
                           "not given (--dp), and tp x pp x cp = " + std::to_string(per_replica) +
                               " does not divide the cluster's " + std::to_string(devices) +
                               " devices");
  }
  q->set_dp(devices / per_replica);
}

}  // namespace

void fill_unstated_job(pb::Job& job, const pb::ModelSpec& model, const pb::ClusterSpec& cluster) {
  if (job.precision() == pb::PRECISION_UNSPECIFIED) job.set_precision(default_precision(cluster));
  if (job.seq_len() <= 0) job.set_seq_len(model.max_seq_len());
}

void fill_unstated(pb::Plan& plan, const pb::ModelSpec& model, const pb::ClusterSpec& cluster) {
  fill_unstated_job(*plan.mutable_job(), model, cluster);
  if (plan.micro_batch_size() <= 0) plan.set_micro_batch_size(1);
  fill_dp(plan, cluster);
}

}  // namespace orrery::plan
