// Pipeline transfers: a stage posts each receive when its schedule reaches it (as Megatron's
// batched send/recv pairs and the executor's blocking receive do) and a transfer starts once both
// ends are posted, so the stage that waits for a micro-batch pays its receive's transfer. Both
// engines price that the same way.
#include <gtest/gtest.h>

#include "dgx_h100_plans.hpp"
#include "orrery/plan/lower.hpp"

namespace orrery::sim {
namespace {

// llama3-8b on one DGX H100 node: pp 2 (1F1B), dp 4, 4 micro-batches per step.
plan::ResolvedPlan pp2_plan() {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(16);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_dp(4);
  p.mutable_parallel()->set_pp(2);
  p.mutable_parallel()->set_schedule(pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
  p.set_micro_batch_size(1);
  return plan::resolve_plan(p, models::load_model("llama3-8b"),
                            topologies::load_cluster("dgx-h100", 1));
}

TEST(PipelineTransfers, AReceiveIsPostedAfterTheComputeBeforeIt) {
  const plan::ResolvedPlan plan = pp2_plan();
  const pb::ExecGraph g = plan::lower(plan);
  int receives = 0, posted_after_compute = 0;
  for (const auto& rank : g.ranks()) {
    int last_compute = -1;
    for (int i = 0; i < rank.nodes_size(); ++i) {
      const pb::ExecNode& n = rank.nodes(i);
      if (n.kind() == pb::NODE_KIND_RECV) {
        ++receives;
        if (last_compute < 0) {
          // The step's first receive (the last stage's first activations) waits for nothing.
          EXPECT_EQ(n.data_deps_size(), 0) << n.name();
          continue;
        }
        ASSERT_EQ(n.data_deps_size(), 1) << n.name();
        EXPECT_EQ(n.data_deps(0), rank.nodes(last_compute).id()) << n.name();
        ++posted_after_compute;
      }
      if (n.stream() == plan::kCompute) last_compute = i;
    }
  }
  // 4 micro-batches: stage 0 receives 4 gradients, stage 1 4 activations, on each of the 4
  // pipelines; every one but the 4 last-stage firsts follows some compute.
  EXPECT_EQ(receives, 32);
  EXPECT_EQ(posted_after_compute, 28);
}

struct Steps {
  double analytic = 0, des = 0;
};

// The step under a profile whose only parameter is the point-to-point curve of the node's
// NVSwitch: `latency_s`, and a bandwidth at which llama3-8b's 16 MiB activations take 16 us.
Steps steps(double latency_s) {
  pb::CalibrationProfile profile;
  pb::CommCurve* p2p = profile.add_comm();
  p2p->set_scope("intra_node");
  p2p->set_latency_s(latency_s);
  p2p->set_bandwidth_bytes_per_s(1e12);
  const test::BothEngines both = test::simulate_both(pp2_plan(), profile);
  return {both.analytic.step_time_s(), both.des.step_time_s()};
}

TEST(PipelineTransfers, EveryMicroBatchPaysTheBottleneckStagesReceive) {
  // The last stage (the head's GEMMs) is the slower one: it posts each micro-batch's
  // activations' receive after the previous backward, long after the first stage sent them, so
  // each of its 4 receives is exposed, and so is the first stage's last gradient: (M + 1) L.
  // (Posted as early as possible, the steady state hid every receive but the fill's 2 L.)
  const double latency = 2e-3;
  const Steps fast = steps(0), slow = steps(latency);
  EXPECT_NEAR(slow.analytic - fast.analytic, 5 * latency, 1e-9);
  EXPECT_NEAR(slow.des - fast.des, 5 * latency, 0.05 * latency);
  EXPECT_NEAR(slow.analytic, slow.des, 0.02 * slow.des);
}

}  // namespace
}  // namespace orrery::sim
