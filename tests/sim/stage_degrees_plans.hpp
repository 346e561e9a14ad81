// The per-stage-degree job the sim tests share: llama3-8b on one DGX A100 and one DGX H100
// (tests/inputs/sim/mixed-1a100-1h100.yaml), stage 0 at tp 4 x dp 2 on the A100s, stage 1 at
// tp 8 x dp 1 on the H100s.
#pragma once

#include <string>

#include "orrery/pb/plan.pb.h"
#include "test_paths.hpp"

namespace orrery::sim::test {

// One DGX A100 (devices 0-7) and one DGX H100 (8-15).
inline const std::string kMixedCluster =
    std::string(ORRERY_TEST_INPUTS) + "/sim/mixed-1a100-1h100.yaml";

inline pb::Plan staged_plan(bool sp = false) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("mixed-1a100-1h100");
  p.mutable_job()->set_global_batch_size(8);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_pp(2);
  p.mutable_parallel()->set_dp(2);
  p.mutable_parallel()->set_sequence_parallel(sp);
  p.set_micro_batch_size(1);
  for (int64_t v : {4, 8}) p.add_stage_tp(v);
  for (int64_t v : {2, 1}) p.add_stage_dp(v);
  return p;
}

}  // namespace orrery::sim::test
