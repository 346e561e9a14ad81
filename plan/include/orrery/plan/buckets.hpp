// How a plan groups parameters into data-parallel gradient buckets: the lowering emits one
// collective per bucket, the analytic engine prices them, the executor reduces them, all by the
// rule here, so a bucket the executor runs is one node of the predicted graph.
#pragma once

#include <cstdint>
#include <vector>

#include "orrery/pb/plan.pb.h"

namespace orrery::plan {

// Parameters per gradient bucket: the plan's bucket_bytes in elements of `grad_bytes`, or, when
// it is 0, Megatron's default of max(40M, 1M x dp) parameters.
double gradient_bucket_params(const pb::Plan& plan, int64_t dp, double grad_bytes);

// Gradient buckets over units given in reduction order (backward: head, last layer ... embedding)
// with their parameters: runs of consecutive units, each closed once it holds at least
// `bucket_params` parameters, the last holding what is left. Units without parameters join no
// bucket; a unit is never split.
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<double>& unit_params,
                                                  double bucket_params);

}  // namespace orrery::plan
