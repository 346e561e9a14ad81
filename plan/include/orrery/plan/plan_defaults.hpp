// What a plan becomes where it states nothing: precision, sequence length, micro-batch and the
// data-parallel degree. One place, so that `simulate`, `plan`, `run` and a library caller given
// the same plan, model and cluster cannot disagree (each command used to fill these itself).
#pragma once

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"

namespace orrery::plan {

// The precision a plan trains in when it states none: bf16 on accelerators (what production
// stacks train in since the A100), fp32 on CPU devices (libtorch's CPU GEMMs run bf16 through
// fp32, and the executor's CPU parity references are fp32).
pb::Precision default_precision(const pb::ClusterSpec& cluster);

// Fills, in place, the job's unstated fields: precision (default_precision) and seq_len (the
// model's max_seq_len). For callers that search the plan's degrees themselves (the planner).
void fill_unstated_job(pb::Job& job, const pb::ModelSpec& model, const pb::ClusterSpec& cluster);

// Fills, in place, each field the plan leaves unstated:
// - job.precision: default_precision(cluster);
// - job.seq_len: the model's max_seq_len;
// - micro_batch_size: 1;
// - parallel.dp: with per-stage degrees, the largest stage dp (it sizes the pipeline
//   micro-batch; with stage_tp and no stage_dp it must be given); otherwise the cluster's devices
//   divided by tp x pp x cp.
// A stated field is never changed. Throws base::InputError naming the field when dp cannot be
// derived (tp x pp x cp does not divide the cluster).
void fill_unstated(pb::Plan& plan, const pb::ModelSpec& model, const pb::ClusterSpec& cluster);

}  // namespace orrery::plan
