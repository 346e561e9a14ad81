// What a plan becomes where it states nothing (plan/plan_defaults.hpp), and the cluster-free
// rules the executor checks (plan::rule_violation): one copy each, shared by simulate, plan, run.
#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/plan_defaults.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "test_paths.hpp"

namespace orrery::plan {
namespace {

// Two DGX H100 nodes: 16 GPUs.
pb::ClusterSpec gpus() { return topologies::load_cluster("dgx-h100", 2); }

// The same shape with a CPU device in place of the H100.
pb::ClusterSpec cpus() {
  pb::ClusterSpec c = gpus();
  pb::DeviceSpec* d = c.add_devices();
  d->set_name("test-cpu-core");
  d->set_kind(pb::DEVICE_KIND_CPU);
  d->set_memory_bytes(16e9);
  for (auto& t : *c.mutable_node_types()) t.set_device("test-cpu-core");
  return c;
}

pb::Plan job(int64_t global_batch) {
  pb::Plan p;
  p.mutable_job()->set_global_batch_size(global_batch);
  return p;
}

TEST(PlanDefaults, PrecisionFollowsTheDevices) {
  EXPECT_EQ(default_precision(gpus()), pb::PRECISION_BF16);
  EXPECT_EQ(default_precision(cpus()), pb::PRECISION_FP32);
}

TEST(PlanDefaults, FillsWhatIsUnstated) {
  const pb::ModelSpec m = models::load_model("llama3-8b");
  pb::Plan p = job(64);
  p.mutable_parallel()->set_tp(4);
  p.mutable_parallel()->set_pp(2);
  fill_unstated(p, m, gpus());
  EXPECT_EQ(p.job().precision(), pb::PRECISION_BF16);
  EXPECT_EQ(p.job().seq_len(), m.max_seq_len());
  EXPECT_EQ(p.micro_batch_size(), 1);
  EXPECT_EQ(p.parallel().dp(), 2);  // 16 devices / (tp 4 x pp 2)
}

TEST(PlanDefaults, NeverChangesAStatedField) {
  const pb::ModelSpec m = models::load_model("llama3-8b");
  pb::Plan p = job(64);
  p.mutable_job()->set_precision(pb::PRECISION_FP8);
  p.mutable_job()->set_seq_len(2048);
  p.set_micro_batch_size(2);
  p.mutable_parallel()->set_dp(4);  // not the cluster's 16: a stated dp stays
  const pb::Plan before = p;
  fill_unstated(p, m, cpus());
  EXPECT_EQ(p.SerializeAsString(), before.SerializeAsString());
}

TEST(PlanDefaults, DpFromStagesOrRefused) {
  const pb::ModelSpec m = models::load_model("llama3-8b");
  pb::Plan p = job(64);
  p.mutable_parallel()->set_pp(2);
  p.add_stage_dp(2);
  p.add_stage_dp(4);
  fill_unstated(p, m, gpus());
  EXPECT_EQ(p.parallel().dp(), 4);  // the largest stage dp sizes the pipeline micro-batch

  pb::Plan tp_only = job(64);
  tp_only.mutable_parallel()->set_pp(2);
  tp_only.add_stage_tp(2);
  tp_only.add_stage_tp(4);
  try {
    fill_unstated(tp_only, m, gpus());
    FAIL() << "stage_tp without dp or stage_dp was accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(e.field(), "parallel.dp");
  }

  pb::Plan odd = job(64);
  odd.mutable_parallel()->set_tp(3);
  try {
    fill_unstated(odd, m, gpus());
    FAIL() << "tp 3 on 16 devices filled a dp";
  } catch (const base::InputError& e) {
    EXPECT_EQ(e.field(), "parallel.dp");
    EXPECT_NE(std::string(e.what()).find("tp x pp x cp = 3 does not divide the cluster's 16"),
              std::string::npos)
        << e.what();
  }
}

TEST(RuleViolation, WordedAsResolvePlanWordsIt) {
  const pb::ModelSpec m = models::load_model("llama3-8b");
  pb::Plan p = job(64);
  fill_unstated(p, m, gpus());
  EXPECT_EQ(rule_violation(p, m), "");
  p.mutable_parallel()->set_tp(3);
  p.mutable_parallel()->set_dp(1);
  const std::string why = rule_violation(p, m);
  EXPECT_EQ(why, "parallel.tp: rule tp-divides-heads: tp 3 must divide num_attention_heads 32");
  try {
    resolve_plan(p, m, gpus());
    FAIL() << "resolve_plan accepted tp 3";
  } catch (const base::InputError& e) {
    EXPECT_EQ(e.what(), why);
  }
}

TEST(RuleViolation, EveryFfnOfAnMoeModelSplitsOverTp) {
  // tiny-moe: one dense layer first, then experts with one shared expert.
  pb::ModelSpec m =
      models::load_model(std::string(ORRERY_SOURCE_DIR) + "/tests/executor/tiny-moe.yaml");
  pb::Plan p = job(4);
  p.set_micro_batch_size(1);
  p.mutable_parallel()->set_tp(2);
  p.mutable_parallel()->set_dp(1);
  EXPECT_EQ(rule_violation(p, m), "");
  pb::ModelSpec odd_shared = m;
  odd_shared.mutable_moe()->set_shared_expert_ffn_hidden_size(63);
  EXPECT_EQ(rule_violation(p, odd_shared),
            "parallel.tp: rule tp-divides-ffn: tp 2 must divide the shared experts' width 63");
  pb::ModelSpec odd_dense = m;
  odd_dense.set_ffn_hidden_size(63);
  EXPECT_EQ(rule_violation(p, odd_dense),
            "parallel.tp: rule tp-divides-ffn: tp 2 must divide the FFN hidden size 63");
}

}  // namespace
}  // namespace orrery::plan
