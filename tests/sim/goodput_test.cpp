// The goodput model (sim/goodput): the closed form by hand, the Monte Carlo simulation against it,
// determinism, checkpoint sizes against the memory model, and bad failure/storage fields.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/models/model_catalog.hpp"
#include "orrery/sim/checkpoint_model.hpp"
#include "orrery/sim/footprint.hpp"
#include "orrery/sim/goodput.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/sim/plan_run.hpp"
#include "orrery/sim/straggler_step.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::sim {
namespace {

// One kind of failure, MTBF M = 10,000 s, restarted in place in R = 100 s (process groups 50,
// load from local NVMe 30, warm-up 20), a blocking checkpoint of C = 100 s, one-second steps.
RunModel simple_run() {
  RunModel run;
  run.step_s = 1;
  run.failures.components.push_back({"gpu", 1, 10000, 1.0 / 10000, FailureCost::kRestartInPlace});
  run.failures.total_rate_per_s = 1.0 / 10000;
  run.checkpoint.blocking_s = 100;
  run.checkpoint.process_group_init_s = 50;
  run.checkpoint.load_local_s = 30;
  run.checkpoint.warmup_s = 20;
  return run;
}

TEST(GoodputClosedForm, DalysExpectedIntervalByHand) {
  // tau = 1000: E[wall] = M e^(R/M) (e^((tau+C)/M) - 1) = 10000 e^0.01 (e^0.11 - 1)
  //           = 10000 x 1.01005017 x 0.11627807 = 1174.4668 s; goodput 1000 / 1174.4668.
  const RunModel run = simple_run();
  EXPECT_DOUBLE_EQ(mean_restart_s(run), 100);
  EXPECT_NEAR(closed_form_goodput(run, 1000), 1000 / 1174.466844952076, 1e-12);
  // Young: sqrt(2 C M) = sqrt(2e6) = 1414.2136; Daly: 1414.2136 (1 + sqrt(0.005)/3 + 0.005/9)
  // - 100 = 1348.3326.
  EXPECT_NEAR(young_interval_s(100, 10000), 1414.213562373095, 1e-9);
  EXPECT_NEAR(daly_interval_s(100, 10000), 1348.332569907747, 1e-9);
  // Without failures only the checkpoint costs: 1000 / 1100.
  RunModel no_failures = run;
  no_failures.failures.total_rate_per_s = 0;
  EXPECT_DOUBLE_EQ(closed_form_goodput(no_failures, 1000), 1000.0 / 1100);
}

TEST(GoodputClosedForm, OptimalIntervalBeatsItsNeighbours) {
  const RunModel run = simple_run();
  const CheckpointInterval best = optimal_interval(run);
  // The exact optimum lies near Daly's first-order interval (1348 s) for C/M = 0.01.
  EXPECT_NEAR(best.interval_s, 1348, 60);
  for (const int64_t steps : {best.steps - 1, best.steps + 1, best.steps / 2, best.steps * 2}) {
    EXPECT_GE(best.goodput, interval_of(run, steps).goodput) << steps;
  }
}

TEST(GoodputMonteCarlo, MeanConvergesToTheClosedForm) {
  const RunModel run = simple_run();
  // 500 intervals of 1000 s, each ending with a checkpoint: E[wall] = 500 x 1174.4668 s.
  const MonteCarloResult mc = monte_carlo(run, 1000, 500 * 1000.0, 400, 7);
  EXPECT_NEAR(mc.mean_wall_s / (500 * 1174.466844952076), 1, 0.005);
  EXPECT_NEAR(mc.goodput, closed_form_goodput(run, 1000), 0.005);
  // Failures come at rate 1/M over the whole wall time (restarts included).
  EXPECT_NEAR(mc.mean_interruptions / (mc.mean_wall_s / 10000), 1, 0.02);
  EXPECT_LE(quantile(mc.wall_s, 0.1), quantile(mc.wall_s, 0.5));
  EXPECT_LE(quantile(mc.wall_s, 0.5), quantile(mc.wall_s, 0.9));
}

TEST(GoodputMonteCarlo, AsynchronousSaveLosesItsBackgroundWindow) {
  // An asynchronous save stops training 10 s and persists 90 s later; the closed form adds the
  // background window to every failure's loss, the simulation rolls back exactly.
  RunModel run = simple_run();
  run.checkpoint.blocking_s = 10;
  run.checkpoint.background_s = 90;
  run.checkpoint.async = true;
  const MonteCarloResult mc = monte_carlo(run, 1000, 500 * 1000.0, 400, 11);
  EXPECT_NEAR(mc.goodput, closed_form_goodput(run, 1000), 0.005);
  EXPECT_GT(mc.goodput, closed_form_goodput(simple_run(), 1000));
}

TEST(GoodputMonteCarlo, SameSeedSameRunsOtherSeedOtherRuns) {
  const RunModel run = simple_run();
  const auto a = monte_carlo(run, 700, 1e5, 50, 42);
  const auto b = monte_carlo(run, 700, 1e5, 50, 42);
  const auto c = monte_carlo(run, 700, 1e5, 50, 43);
  EXPECT_EQ(a.wall_s, b.wall_s);
  EXPECT_EQ(a.mean_lost_work_s, b.mean_lost_work_s);
  EXPECT_NE(a.wall_s, c.wall_s);
}

TEST(GoodputMonteCarlo, SparesShortenRestartsUntilTheyRunOut) {
  RunModel run = simple_run();
  run.failures.components[0].cost = FailureCost::kNodeLost;
  run.checkpoint.requeue_s = 1000;
  run.checkpoint.spare_swap_s = 10;
  run.checkpoint.repair_s = 1e9;  // never back: the pool empties
  run.checkpoint.spare_nodes = 3;
  const auto mc = monte_carlo(run, 1000, 200 * 1000.0, 20, 3);
  EXPECT_NEAR(mc.mean_spares_missed, mc.mean_interruptions - 3, 1e-9);
}

TEST(GoodputStragglers, SlowestMemberPacesTheStep) {
  // 1 - 0.999^1000 = 0.63230458 of steps have a straggler 1.5x slower: 1 + 0.5 x 0.63230458.
  EXPECT_NEAR(straggler_step_factor(0.001, 1.5, 1000), 1.316152287614518, 1e-12);
  EXPECT_DOUBLE_EQ(straggler_step_factor(0, 3, 16384), 1);
  EXPECT_DOUBLE_EQ(straggler_step_factor(1, 3, 8), 3);
}

// simple_run() whose failures restart one of 4 replicas (one per node, state copied from a live
// one in 5 s, survivors regroup in 10 s), plus job-wide switch failures every 1e6 s.
RunModel replica_run() {
  RunModel run = simple_run();
  run.failures.components.push_back(
      {"switch", 1, 1e6, 1e-6, FailureCost::kRestartInPlace, /*job_wide=*/true});
  run.failures.total_rate_per_s += 1e-6;
  run.replicas.replicas = 4;
  run.replicas.ranks_per_replica = 8;
  run.replicas.replicas_per_node = 1;
  run.replicas.recovery_s = 5;
  run.replicas.regroup_s = 10;
  run.restart_replicas = true;
  return run;
}

TEST(GoodputReplicaRestarts, ClosedFormByHand) {
  const RunModel run = replica_run();
  const ComponentFailures& gpu = run.failures.components[0];
  // Downtime: restart in place 100 s without its 30 s load, plus the 5 s copy = 75 s.
  EXPECT_DOUBLE_EQ(replica_downtime_s(run, gpu), 75);
  // Cost to the job: regroup 10 + half a step 0.5 + 1/4 of the downtime 18.75 = 29.25 s.
  EXPECT_DOUBLE_EQ(replica_restart_cost_s(run, gpu, 0.5, 75), 29.25);
  EXPECT_FALSE(restarts_job(run, gpu));
  EXPECT_TRUE(restarts_job(run, run.failures.components[1]));
  EXPECT_DOUBLE_EQ(job_failure_rate_per_s(run), 1e-6);
  EXPECT_DOUBLE_EQ(mean_restart_s(run), 100);  // the switch's, restarted in place
  // (1 - 1e-4 x 29.25) x tau / (M e^(R/M) (e^((tau+C)/M) - 1)) with M = 1e6, R = 100, C = 100.
  const double m = 1e6, tau = 1000;
  const double daly = tau / (m * std::exp(100 / m) * std::expm1((tau + 100) / m));
  EXPECT_NEAR(closed_form_goodput(run, tau), (1 - 1e-4 * 29.25) * daly, 1e-12);
  // Without --restart-scope replica the same run restarts the job on every failure.
  RunModel job = run;
  job.restart_replicas = false;
  EXPECT_DOUBLE_EQ(job_failure_rate_per_s(job), 1e-4 + 1e-6);
  EXPECT_GT(closed_form_goodput(run, optimal_interval(run).interval_s),
            closed_form_goodput(job, optimal_interval(job).interval_s) + 0.05);
  // Checkpoints guard only against the rare job-wide failures: the optimum interval grows.
  EXPECT_GT(optimal_interval(run).interval_s, 10 * optimal_interval(job).interval_s);
}

TEST(GoodputReplicaRestarts, MonteCarloAgreesWithTheClosedForm) {
  const RunModel run = replica_run();
  const int64_t steps = optimal_interval(run).steps;
  const MonteCarloResult mc = monte_carlo(run, steps, 2e6, 200, 5);
  EXPECT_NEAR(mc.goodput, closed_form_goodput(run, static_cast<double>(steps)), 0.003);
  // Nearly every failure is ridden out by the other replicas.
  EXPECT_GT(mc.mean_replica_restarts, 0.95 * mc.mean_interruptions);
  EXPECT_LE(mc.mean_replica_restarts, mc.mean_interruptions);
  // Two replicas per node: a node's failure takes out half the job, and it costs more.
  RunModel shared = run;
  shared.replicas.replicas_per_node = 2;
  EXPECT_LT(monte_carlo(shared, steps, 2e6, 200, 5).goodput, mc.goodput);
}

// Llama 3 8B at seq 2048, micro-batch 1, two sequences per replica; `shard_group` for HSDP.
plan::ResolvedPlan llama8b(int64_t tp, int64_t dp, pb::Sharding sharding, pb::ClusterSpec cluster,
                           int64_t shard_group = 0) {
  pb::Plan p;
  p.set_model("llama3-8b");
  p.set_cluster("dgx-h100");
  p.mutable_job()->set_global_batch_size(dp * 2);
  p.mutable_job()->set_seq_len(2048);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.set_micro_batch_size(1);
  p.mutable_parallel()->set_tp(tp);
  p.mutable_parallel()->set_dp(dp);
  p.set_sharding(sharding);
  if (shard_group > 0) p.set_shard_group_size(shard_group);
  return plan::resolve_plan(p, models::load_model("llama3-8b"), cluster);
}

plan::ResolvedPlan llama8b(int64_t tp, int64_t dp, pb::Sharding sharding) {
  return llama8b(tp, dp, sharding, topologies::load_cluster("dgx-h100", tp * dp / 8));
}

pb::ClusterSpec always_straggling() {
  pb::ClusterSpec c = topologies::load_cluster("dgx-h100", 1);
  c.mutable_failures()->set_straggler_fraction(1);  // a straggler in every step
  c.mutable_failures()->set_straggler_slowdown(1.5);
  return c;
}

TEST(GoodputStragglers, SimulatedStepRatioReplacesTheWholeStepMultiplier) {
  // With a straggler in every step, the factor is what it does to the step: the closed form's
  // 1.5 (the whole step), or the simulation's ratio when one is given.
  const plan::ResolvedPlan plan = llama8b(1, 8, pb::SHARDING_NONE, always_straggling());
  const topologies::Topology topology(plan.cluster);
  const PlanRun closed = plan_run(plan, topology, 10, "c.yaml");
  EXPECT_DOUBLE_EQ(closed.straggler_factor, 1.5);
  EXPECT_EQ(closed.straggler_source, "closed form: the whole step 1.5x slower");
  double asked = 0;
  const PlanRun simulated = plan_run(plan, topology, 10, "c.yaml", {}, [&](double slowdown) {
    asked = slowdown;
    return StepRatio{1.2, "des: test"};
  });
  EXPECT_EQ(asked, 1.5);
  EXPECT_DOUBLE_EQ(simulated.straggler_factor, 1.2);
  EXPECT_DOUBLE_EQ(simulated.run.step_s, 12);
  EXPECT_EQ(simulated.straggler_source, "des: test");
}

TEST(GoodputStragglers, DesStragglerRaisesADataParallelStepByLessThanItsSlowdown) {
  // dp 8, nothing overlapped: the slow GPU (rank 0's, GPU 0) computes 1.5x as long and the
  // others wait at the gradient all-reduce, which keeps its pace: 1 < ratio < 1.5.
  const plan::ResolvedPlan plan = llama8b(1, 8, pb::SHARDING_NONE, always_straggling());
  EXPECT_EQ(straggler_device(plan), 0);
  const topologies::Topology topology(plan.cluster);
  const CostModels costs(topology, plan.precision.dtype);
  DesOptions o;
  o.timeline = false;
  const double step_s = simulate_des(plan, costs, o).result.step_time_s();
  const StepRatio r = des_straggler_ratio(plan, nullptr, step_s, 1.5, o);
  EXPECT_GT(r.ratio, 1.05);
  EXPECT_LT(r.ratio, 1.45);
  EXPECT_EQ(r.source.rfind("des: GPU 0 at 1.5x makes the step ", 0), 0u) << r.source;
  o.max_nodes = 1000;  // the all-ranks run no longer fits: the closed form, and why
  const StepRatio over = des_straggler_ratio(plan, nullptr, step_s, 1.5, o);
  EXPECT_DOUBLE_EQ(over.ratio, 1.5);
  EXPECT_NE(over.source.find("is over its budget"), std::string::npos) << over.source;
}

TEST(GoodputCheckpoint, SizeIsTheMemoryModelsOptimizerStateWrittenOnce) {
  // bf16 mixed precision: the fp32 master weights and Adam's two moments, 12 bytes per parameter
  // (8,030,261,248 of llama3-8b), written once whatever the sharding.
  constexpr double kBytes = 12 * 8030261248.0;
  for (const auto sharding : {pb::SHARDING_NONE, pb::SHARDING_ZERO1, pb::SHARDING_FSDP}) {
    const plan::ResolvedPlan plan = llama8b(1, 16, sharding);
    const topologies::Topology topology(plan.cluster);
    const CheckpointModel c = checkpoint_model(plan, footprint(plan, topology));
    const pb::RankMemory m = memory_per_stage(plan)[0];
    EXPECT_DOUBLE_EQ(c.rank_bytes, m.optimizer_bytes()) << sharding;
    EXPECT_NEAR(c.total_bytes, kBytes, kBytes * 1e-12) << sharding;
    const double shards = sharding == pb::SHARDING_NONE ? 1 : 16;
    EXPECT_NEAR(c.rank_bytes, kBytes / shards, kBytes * 1e-12) << sharding;
    // Two nodes share the writes; the snapshot crosses each GPU's 63 GB/s PCIe link.
    EXPECT_DOUBLE_EQ(c.node_bytes, c.total_bytes / 2);
    EXPECT_DOUBLE_EQ(c.snapshot_s, c.rank_bytes / 63e9);
  }
  // Tensor parallelism splits the weights: each of 2 TP ranks writes its half, once.
  const plan::ResolvedPlan tp2 = llama8b(2, 8, pb::SHARDING_NONE);
  const topologies::Topology topology(tp2.cluster);
  const CheckpointModel c = checkpoint_model(tp2, footprint(tp2, topology));
  EXPECT_DOUBLE_EQ(c.total_bytes, 2 * memory_per_stage(tp2)[0].optimizer_bytes());
}

plan::ResolvedPlan hsdp_llama8b(int64_t tp, int64_t dp, int64_t shard_group) {
  return llama8b(tp, dp, pb::SHARDING_HSDP, topologies::load_cluster("dgx-h100", tp * dp / 8),
                 shard_group);
}

TEST(GoodputReplicaRestarts, ReplicasAreTheCopiesOfTheWholeState) {
  struct Case {
    plan::ResolvedPlan plan;
    int64_t replicas;
    double per_node;
  };
  const std::vector<Case> cases = {
      {llama8b(8, 2, pb::SHARDING_NONE), 2, 1},  // a replica per node
      {llama8b(4, 4, pb::SHARDING_NONE), 4, 2},  // two replicas share each node
      {hsdp_llama8b(8, 4, 2), 2, 1},             // shard groups of 2 nodes, 2 of them
      {llama8b(8, 2, pb::SHARDING_ZERO1), 1, 1},
      {llama8b(8, 2, pb::SHARDING_FSDP), 1, 1},
  };
  for (const auto& c : cases) {
    const topologies::Topology topology(c.plan.cluster);
    const CheckpointModel ck = checkpoint_model(c.plan, footprint(c.plan, topology));
    const ReplicaRestarts r = replica_restarts(c.plan, topology, ck);
    SCOPED_TRACE(pb::Sharding_Name(c.plan.sharding()) + " dp " + std::to_string(c.plan.degrees.dp));
    EXPECT_EQ(r.replicas, c.replicas);
    EXPECT_EQ(r.ranks_per_replica * r.replicas, c.plan.world_size());
    if (c.replicas == 1) {
      EXPECT_NE(r.why_not.find("no replica holds a whole copy"), std::string::npos) << r.why_not;
      continue;
    }
    EXPECT_DOUBLE_EQ(r.replicas_per_node, c.per_node);
    // Each node fetches its 8 ranks' shards over 8 x 400 Gb/s NICs, then to its GPUs.
    EXPECT_NEAR(r.recovery_s, 8 * ck.rank_bytes / (8 * 50e9) + ck.snapshot_s, 1e-9);
    // Regrouped at the job's per-rank cost for R members: 30 s + 2 ms x R.
    EXPECT_DOUBLE_EQ(r.regroup_s, 30 + 2e-3 * static_cast<double>(c.replicas));
  }
}

TEST(GoodputCheckpoint, SavePathByHand) {
  pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 2);
  auto* s = cluster.mutable_storage();
  s->set_host_copy_bytes_per_s(10e9);
  s->set_local_write_bytes_per_s(5e9);
  s->set_remote_node_bytes_per_s(1e9);
  s->set_remote_aggregate_bytes_per_s(1.5e9);  // slower than the two nodes together
  s->set_async_save(true);
  const plan::ResolvedPlan plan = llama8b(1, 16, pb::SHARDING_ZERO1, cluster);
  const topologies::Topology topology(plan.cluster);
  const CheckpointModel c = checkpoint_model(plan, footprint(plan, topology));
  const double total = 12 * 8030261248.0;
  EXPECT_NEAR(c.snapshot_s, total / 16 / 10e9, 1e-9);
  EXPECT_NEAR(c.local_s, total / 2 / 5e9, 1e-9);
  EXPECT_NEAR(c.remote_s, total / 1.5e9, 1e-9);
  EXPECT_DOUBLE_EQ(c.blocking_s, c.snapshot_s);
  EXPECT_DOUBLE_EQ(c.background_s, c.local_s + c.remote_s);
  // Every default used is listed with its source; these five came from the file.
  int from_file = 0;
  for (const auto& setting : c.settings) from_file += setting.source == "cluster file";
  EXPECT_EQ(from_file, 5);
}

TEST(GoodputCheckpoint, RestartsReadLocallyUnlessANodeWasLost) {
  pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 2);
  auto* s = cluster.mutable_storage();
  s->set_host_copy_bytes_per_s(10e9);
  s->set_local_read_bytes_per_s(4e9);
  s->set_remote_node_read_bytes_per_s(2e9);
  s->set_remote_aggregate_bytes_per_s(1e15);  // no aggregate limit in play
  const plan::ResolvedPlan plan = llama8b(1, 16, pb::SHARDING_ZERO1, cluster);
  const topologies::Topology topology(plan.cluster);
  const CheckpointModel c = checkpoint_model(plan, footprint(plan, topology));
  const double node = 12 * 8030261248.0 / 2, snapshot = 12 * 8030261248.0 / 16 / 10e9;
  EXPECT_NEAR(c.load_local_s, node / 4e9 + snapshot, 1e-9);
  EXPECT_NEAR(c.load_s, node / 2e9 + snapshot, 1e-9);
  EXPECT_DOUBLE_EQ(c.restart_s(false, false) - c.restart_s(true, true),
                   c.load_local_s - c.load_s - c.spare_swap_s);
}

TEST(GoodputCheckpoint, MeasuredStorageFillsOnlyWhatTheClusterFileLeavesOut) {
  pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 2);
  cluster.mutable_storage()->set_local_write_bytes_per_s(5e9);
  pb::CheckpointStorage measured;
  measured.set_local_write_bytes_per_s(1e9);  // the file's 5e9 wins
  measured.set_local_read_bytes_per_s(3e9);   // the file has none: used
  const plan::ResolvedPlan plan = llama8b(1, 16, pb::SHARDING_ZERO1, cluster);
  const topologies::Topology topology(plan.cluster);
  const CheckpointModel c =
      checkpoint_model(plan, footprint(plan, topology), {&measured, "ckpt.yaml"});
  const double node = 12 * 8030261248.0 / 2;
  EXPECT_NEAR(c.local_s, node / 5e9, 1e-9);
  EXPECT_NEAR(c.load_local_s - c.snapshot_s, node / 3e9, 1e-9);
  std::map<std::string, std::string> source;
  for (const auto& setting : c.settings) source[setting.field] = setting.source;
  EXPECT_EQ(source["storage.local_write_bytes_per_s"], "cluster file");
  EXPECT_EQ(source["storage.local_read_bytes_per_s"], "measured: ckpt.yaml");
  EXPECT_EQ(source["storage.remote_node_read_bytes_per_s"], "default: remote_node_bytes_per_s");
}

TEST(GoodputFootprint, CountsThePlansComponents) {
  const plan::ResolvedPlan plan = llama8b(8, 2, pb::SHARDING_NONE);
  const topologies::Topology topology(plan.cluster);
  const Footprint f = footprint(plan, topology);
  EXPECT_EQ(f.gpus, 16);
  EXPECT_EQ(f.hosts, 2);
  EXPECT_EQ(f.nics, 16);  // 8 NICs per DGX H100
  EXPECT_EQ(f.links, 16);
  EXPECT_GE(f.switches, 1);
  const FailureRates r = failure_rates(plan.cluster, f, "dgx-h100");
  ASSERT_EQ(r.components.size(), 8u);
  double total = 0;
  for (const auto& c : r.components) total += c.rate_per_s;
  EXPECT_DOUBLE_EQ(r.total_rate_per_s, total);
  // gpu: 16 GPUs over the default per-GPU MTBF.
  EXPECT_DOUBLE_EQ(r.components[0].rate_per_s, 16 / r.components[0].mtbf_s);
  for (const auto& s : r.settings)
    EXPECT_NE(s.source.find("default"), std::string::npos) << s.field;
}

// A throttled GPU without a detector: an episode every 1e5 s on average, lasting 600 s of wall
// time at 1.5x the step; and a degraded link that a detector drains after 10 slow steps.
TEST(GoodputDegradation, SlowStepsAndDrainsByHand) {
  RunModel run = simple_run();
  run.degradations.push_back({"gpu", 1e-5, 1.5, 0, 600});
  // 600 s x (1 - 1 / 1.5) = 200 s lost per episode; 1e-5 x 200 = 0.2% of the wall time.
  EXPECT_NEAR(degradation_slow_s(run, run.degradations[0]), 200, 1e-9);
  EXPECT_NEAR(degradation_loss_fraction(run), 0.002, 1e-12);
  EXPECT_NEAR(closed_form_goodput(run, 1000) / closed_form_goodput(simple_run(), 1000), 0.998,
              1e-12);
  // 10 slow steps of 1 s at 1.5x: 5 s, then the drain: a checkpoint (100 s) and the restart
  // after a lost node.
  const Degradation link{"link", 1e-5, 1.5, 10, 0};
  EXPECT_NEAR(degradation_slow_s(run, link), 5, 1e-12);
  EXPECT_NEAR(degradation_drain_s(run, link, 700), 800, 1e-12);
}

TEST(GoodputDegradation, MonteCarloAgreesWithTheClosedForm) {
  RunModel run = simple_run();
  run.degradations.push_back({"gpu", 2e-5, 1.5, 0, 3000});  // 1000 s lost each: 2%
  run.degradations.push_back({"link", 1e-5, 2, 20, 0});     // 20 s slow, then a drain
  const MonteCarloResult mc = monte_carlo(run, 1000, 1e6, 400, 7);
  EXPECT_NEAR(mc.goodput / closed_form_goodput(run, 1000), 1, 0.005);
  EXPECT_NEAR(mc.mean_degradations / (mc.mean_wall_s * 3e-5), 1, 0.03);
  // Episodes start while training: (2e-5 x 1000 + 1e-5 x 20) s lost per second of it.
  EXPECT_NEAR(mc.mean_slow_s / (mc.mean_wall_s * 0.0202), 1, 0.03);
  const double drain = run.checkpoint.blocking_s + run.checkpoint.restart_s(true, false);
  EXPECT_NEAR(mc.mean_drain_s / (mc.mean_wall_s * 1e-5 * drain), 1, 0.05);
  const MonteCarloResult healthy = monte_carlo(simple_run(), 1000, 1e6, 400, 7);
  EXPECT_EQ(healthy.mean_degradations, 0);
  EXPECT_LT(mc.goodput, healthy.goodput * 0.985);
}

// Expected failures per day of the kinds in `kinds`.
double per_day(const FailureRates& r, const std::vector<std::string>& kinds) {
  double rate = 0;
  for (const auto& c : r.components) {
    for (const auto& k : kinds) rate += c.component == k ? c.rate_per_s : 0;
  }
  return rate * 86400;
}

// docs/goodput.md, "Beyond Llama 3". OPT-175B (Zhang et al., arXiv 2205.01068, section 2.5): 992
// A100s (124 DGX A100 nodes; 130 switches is the footprint `orrery goodput` computes for them),
// hardware failures caused at least 35 manual restarts and an estimated 70+ automatic ones over
// two months. orrery's defaults predict 124 nodes x 4.42 / 1000 per node-day x 321 / 384 (the
// hardware share) x 60 days = 27.49 node losses, plus 992 links x 0.057% and 130 switches x
// 0.051% a month for two months = 1.26: 28.75 hardware restarts, and 41.7 with RSC-1's node rate.
// Nothing is fitted: the test pins that orrery falls short of OPT's 105+ (the gap the docs
// discuss), so a change that moves it shows here.
TEST(GoodputPublished, OptLogbookFootprintFallsShortOfItsHardwareRestarts) {
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-a100", 124);
  const FailureRates r = failure_rates(cluster, Footprint{992, 124, 992, 992, 130}, "dgx-a100");
  const std::vector<std::string> node_lost = {"gpu", "hbm", "host", "nic"};
  EXPECT_NEAR(per_day(r, node_lost) * 60, 27.49, 0.01);
  const double fabric = per_day(r, {"link", "switch"}) * 60;
  EXPECT_NEAR(fabric, 1.26, 0.01);
  const double rsc1 = per_day(r, node_lost) * 60 * 6.50 / 4.42 + fabric;
  EXPECT_NEAR(rsc1, 41.69, 0.01);
  EXPECT_LT(rsc1, 35 + 70);
}

// Meta's RSC study (arXiv 2410.21680) projects a job's MTTF as 1 / (nodes x r_f): at 16,384
// GPUs (2,048 nodes) 1.80 h with RSC-1's 6.50 and 5.01 h with RSC-2's 2.34 failures per 1000
// node-days. orrery's job MTBF for that footprint (its node rate is the two clusters' mean, plus
// links and switches from Alibaba HPN) lies between them, at 2.56 h.
TEST(GoodputPublished, RscJobMttfAtSixteenThousandGpusLiesInsideTheTwoClusters) {
  const pb::ClusterSpec cluster = topologies::load_cluster("dgx-h100", 2048);
  const FailureRates r =
      failure_rates(cluster, Footprint{16384, 2048, 16384, 16384, 1056}, "dgx-h100");
  const double mtbf_h = 1 / r.total_rate_per_s / 3600;
  EXPECT_NEAR(mtbf_h, 2.56, 0.01);
  EXPECT_GT(mtbf_h, 24 / (2048 * 6.50 / 1000));
  EXPECT_LT(mtbf_h, 24 / (2048 * 2.34 / 1000));
}

// The dgx-h100 preset with `fields` added as YAML, read and used; the error, or "".
std::string error_of(const std::string& fields) {
  const std::string text = to_yaml(topologies::load_cluster("dgx-h100", 1)) + "\n" + fields + "\n";
  try {
    pb::ClusterSpec cluster;
    parse_spec(text, "c.yaml", SpecFormat::kYaml, &cluster);
    failure_rates(cluster, Footprint{8, 1, 8, 8, 1}, "c.yaml");
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(GoodputInput, BadFailureAndStorageFieldsAreRefusedWithFieldAndReason) {
  EXPECT_NE(error_of("failures: {gpu_mtbf_s: -5 h}")
                .find("failures.gpu_mtbf_s: got -5 h, expected a value > 0"),
            std::string::npos)
      << error_of("failures: {gpu_mtbf_s: -5 h}");
  EXPECT_NE(error_of("failures: {straggler_fraction: 1.5}")
                .find("c.yaml: failures.straggler_fraction: must be between 0 and 1, got 1.5"),
            std::string::npos)
      << error_of("failures: {straggler_fraction: 1.5}");
  EXPECT_NE(error_of("failures: {straggler_slowdown: 0.5}")
                .find("failures.straggler_slowdown: a straggler is slower: must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_of("storage: {spare_nodes: -1}").find("storage.spare_nodes"), std::string::npos)
      << error_of("storage: {spare_nodes: -1}");
  EXPECT_NE(error_of("storage: {remote_aggregate_bytes_per_s: 0}").find("expected a value > 0"),
            std::string::npos);
}

}  // namespace
}  // namespace orrery::sim
