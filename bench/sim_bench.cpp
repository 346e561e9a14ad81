// Simulator speed on the reference cases: llama3-70b on 1,024 H100 and llama3-405b on
// 16,384 H100. Run: build/bench/orrery_sim_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>

#include "orrery/models/model_catalog.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/sim/plan_run.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"

namespace {

using namespace orrery;

struct Case {
  pb::ModelSpec model;
  pb::ClusterSpec cluster;
  pb::Plan plan;
};

// llama3-70b, 128 DGX H100 nodes: tp8 pp4 vp5 dp32, SP, distributed optimizer.
Case llama70b_1024() {
  Case c{models::preset("llama3-70b"), topologies::load_cluster("dgx-h100", 128), {}};
  auto& p = c.plan;
  p.mutable_job()->set_global_batch_size(1024);
  p.mutable_job()->set_seq_len(8192);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  auto* q = p.mutable_parallel();
  q->set_tp(8), q->set_pp(4), q->set_vp(5), q->set_dp(32), q->set_sequence_parallel(true);
  p.set_micro_batch_size(1);
  p.set_sharding(pb::SHARDING_ZERO1);
  p.set_overlap_grad_reduce(true), p.set_overlap_param_gather(true);
  return c;
}

// llama3-405b, 2,048 DGX H100 nodes: tp8 pp16 dp128, SP, uneven stages (126 layers).
Case llama405b_16384() {
  Case c{models::preset("llama3-405b"), topologies::load_cluster("dgx-h100", 2048), {}};
  auto& p = c.plan;
  p.mutable_job()->set_global_batch_size(2048);
  p.mutable_job()->set_seq_len(8192);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  auto* q = p.mutable_parallel();
  q->set_tp(8), q->set_pp(16), q->set_dp(128), q->set_sequence_parallel(true);
  p.set_micro_batch_size(1);
  for (int s = 0; s < 16; ++s) p.add_layers_per_stage(s == 0 || s == 15 ? 7 : 8);
  p.set_sharding(pb::SHARDING_ZERO1);
  p.set_overlap_grad_reduce(true), p.set_overlap_param_gather(true);
  return c;
}

// Context-parallel plans (Megatron's load-balanced causal ring), the cases where des work grows
// with cp: llama3-70b at seq 32k on 128 DGX H100 nodes with cp 1/4/8/16 (the same 16M-token
// batch), and llama3-405b on 1,024 nodes as Meta trained it (Llama 3 paper, Table 4): seq 8k
// tp8 pp16 dp64, and seq 128k tp8 cp16 pp16 dp4.
Case cp_case(const char* model, int64_t nodes, int64_t seq, int64_t batch, int64_t tp, int64_t cp,
             int64_t pp, int64_t dp, int64_t vp) {
  Case c{models::preset(model), topologies::load_cluster("dgx-h100", nodes), {}};
  // llama3-70b's preset keeps Llama 3's 8k context; Llama 3.1 70B is the same model at 128k.
  c.model.set_max_seq_len(std::max<int64_t>(c.model.max_seq_len(), seq));
  auto& p = c.plan;
  p.mutable_job()->set_global_batch_size(batch);
  p.mutable_job()->set_seq_len(seq);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  auto* q = p.mutable_parallel();
  q->set_tp(tp), q->set_cp(cp), q->set_pp(pp), q->set_dp(dp), q->set_sequence_parallel(true);
  if (vp > 1) q->set_vp(vp);
  p.set_micro_batch_size(1);
  // 126 layers over 16 stages: one fewer on the first and last (embedding, head), as above.
  const int64_t layers = c.model.num_layers();
  if (layers % pp != 0) {
    for (int64_t s = 0; s < pp; ++s)
      p.add_layers_per_stage(layers / pp + (s == 0 || s == pp - 1 ? 0 : 1));
  }
  p.set_recompute(pb::RECOMPUTE_SELECTIVE);
  p.set_sharding(pb::SHARDING_ZERO1);
  p.set_overlap_grad_reduce(true), p.set_overlap_param_gather(true);
  return c;
}
Case llama70b_seq32k_cp1() { return cp_case("llama3-70b", 128, 32768, 512, 8, 1, 8, 16, 1); }
Case llama70b_seq32k_cp4() { return cp_case("llama3-70b", 128, 32768, 512, 8, 4, 4, 8, 1); }
Case llama70b_seq32k_cp8() { return cp_case("llama3-70b", 128, 32768, 512, 8, 8, 4, 4, 1); }
Case llama70b_seq32k_cp16() { return cp_case("llama3-70b", 128, 32768, 512, 8, 16, 2, 4, 1); }
Case llama405b_seq8k_cp1() { return cp_case("llama3-405b", 1024, 8192, 2048, 8, 1, 16, 64, 1); }
Case llama405b_seq128k_cp16() { return cp_case("llama3-405b", 1024, 131072, 128, 8, 16, 16, 4, 1); }

template <Case (*Make)()>
void BM_Analytic(benchmark::State& state) {
  const Case c = Make();
  const plan::ResolvedPlan plan = plan::resolve_plan(c.plan, c.model, c.cluster);
  const topologies::Topology topology(c.cluster);
  const sim::CostModels costs(topology, plan.precision.dtype);
  double step = 0;
  for (auto _ : state) {
    step = sim::simulate_analytic(plan, costs).result.step_time_s();
    benchmark::DoNotOptimize(step);
  }
  state.counters["step_s"] = step;
}

// One forked SimGrid run per iteration, symmetric mode (one rank per (cp, pp) simulated, the
// other ranks' traffic mirrored onto their links).
// `fold_cp` false: one rank per (cp, pp) index, as before cp rings were folded.
template <Case (*Make)(), bool fold_cp = true>
void BM_Des(benchmark::State& state) {
  const Case c = Make();
  const plan::ResolvedPlan plan = plan::resolve_plan(c.plan, c.model, c.cluster);
  const topologies::Topology topology(c.cluster);
  const sim::CostModels costs(topology, plan.precision.dtype);
  sim::DesOptions options;
  options.timeline = false;
  options.fold_cp = fold_cp;
  state.counters["ranks"] = static_cast<double>(sim::des_simulated_ranks(plan, costs, options));
  pb::SimResult r;
  for (auto _ : state) r = sim::simulate_des(plan, costs, options).result;
  state.counters["step_s"] = r.step_time_s();
  state.counters["events"] = static_cast<double>(r.events());
  state.counters["events_per_s"] =
      r.wall_time_s() > 0 ? static_cast<double>(r.events()) / r.wall_time_s() : 0;
}

// `orrery goodput`'s work on one plan, from the plan file's contents to the Monte Carlo: resolve,
// the analytic step, the failure and checkpoint models, the optimal interval and `trials` seeded
// runs to `days` failure-free days (the goal: 16K GPUs over 30 days in <= 5 s).
template <Case (*Make)()>
void BM_Goodput(benchmark::State& state) {
  const Case c = Make();
  const double days = 30;
  const int64_t trials = state.range(0);
  sim::MonteCarloResult mc;
  for (auto _ : state) {
    const plan::ResolvedPlan plan = plan::resolve_plan(c.plan, c.model, c.cluster);
    const topologies::Topology topology(c.cluster);
    const sim::CostModels costs(topology, plan.precision.dtype);
    const double step_s = sim::simulate_analytic(plan, costs).result.step_time_s();
    const sim::PlanRun run = sim::plan_run(plan, topology, step_s, c.cluster.name());
    const sim::CheckpointInterval every = sim::optimal_interval(run.run);
    mc = sim::monte_carlo(run.run, every.steps, days * 86400, trials, 1);
    benchmark::DoNotOptimize(mc.goodput);
  }
  state.counters["goodput"] = mc.goodput;
  state.counters["interruptions"] = mc.mean_interruptions;
}

template <Case (*Make)()>
void BM_Resolve(benchmark::State& state) {
  const Case c = Make();
  for (auto _ : state) benchmark::DoNotOptimize(plan::resolve_plan(c.plan, c.model, c.cluster));
}

template <Case (*Make)()>
void BM_Memory(benchmark::State& state) {
  const Case c = Make();
  const plan::ResolvedPlan plan = plan::resolve_plan(c.plan, c.model, c.cluster);
  for (auto _ : state) benchmark::DoNotOptimize(sim::memory_per_stage(plan));
}

template <Case (*Make)()>
void BM_LowerRepresentatives(benchmark::State& state) {
  const Case c = Make();
  const plan::ResolvedPlan plan = plan::resolve_plan(c.plan, c.model, c.cluster);
  plan::LowerOptions options;
  options.ranks = plan::representative_ranks(plan);
  int64_t nodes = 0;
  for (auto _ : state) {
    const auto g = plan::lower(plan, options);
    nodes = 0;
    for (const auto& r : g.ranks()) nodes += r.nodes_size();
  }
  state.counters["nodes"] = static_cast<double>(nodes);
}

template <Case (*Make)()>
void BM_Topology(benchmark::State& state) {
  const Case c = Make();
  for (auto _ : state) benchmark::DoNotOptimize(topologies::Topology(c.cluster).num_devices());
}

BENCHMARK(BM_Analytic<llama70b_1024>)
    ->Name("analytic/llama3-70b/1024xH100")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Analytic<llama405b_16384>)
    ->Name("analytic/llama3-405b/16384xH100")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Des<llama70b_1024>)
    ->Name("des/llama3-70b/1024xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(3);
BENCHMARK(BM_Des<llama405b_16384>)
    ->Name("des/llama3-405b/16384xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp1>)
    ->Name("des/llama3-70b/seq32k/cp1/1024xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp4>)
    ->Name("des/llama3-70b/seq32k/cp4/1024xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp4, false>)
    ->Name("des/llama3-70b/seq32k/cp4/1024xH100/unfolded")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp8>)
    ->Name("des/llama3-70b/seq32k/cp8/1024xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp8, false>)
    ->Name("des/llama3-70b/seq32k/cp8/1024xH100/unfolded")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp16>)
    ->Name("des/llama3-70b/seq32k/cp16/1024xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama70b_seq32k_cp16, false>)
    ->Name("des/llama3-70b/seq32k/cp16/1024xH100/unfolded")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama405b_seq8k_cp1>)
    ->Name("des/llama3-405b/seq8k/cp1/8192xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama405b_seq128k_cp16>)
    ->Name("des/llama3-405b/seq128k/cp16/8192xH100")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Des<llama405b_seq128k_cp16, false>)
    ->Name("des/llama3-405b/seq128k/cp16/8192xH100/unfolded")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Goodput<llama405b_16384>)
    ->Arg(1000)
    ->Name("goodput/llama3-405b/16384xH100/30d/1000-trials")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Resolve<llama405b_16384>)
    ->Name("resolve_plan/llama3-405b/16384xH100")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memory<llama405b_16384>)
    ->Name("memory/llama3-405b/16384xH100")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerRepresentatives<llama70b_1024>)
    ->Name("lower_representatives/llama3-70b/1024xH100")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerRepresentatives<llama405b_16384>)
    ->Name("lower_representatives/llama3-405b/16384xH100")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Topology<llama405b_16384>)
    ->Name("topology/dgx-h100/16384")
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
