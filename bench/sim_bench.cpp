// Simulator speed on the reference cases: llama3-70b on 1,024 H100 and llama3-405b on
// 16,384 H100. Run: build/bench/orrery_sim_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include "orrery/models/model_catalog.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/sim/lower.hpp"
#include "orrery/sim/memory_model.hpp"
#include "orrery/sim/resolved_plan.hpp"
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

template <Case (*Make)()>
void BM_Analytic(benchmark::State& state) {
  const Case c = Make();
  const sim::ResolvedPlan plan = sim::resolve_plan(c.plan, c.model, c.cluster);
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
template <Case (*Make)()>
void BM_Des(benchmark::State& state) {
  const Case c = Make();
  const sim::ResolvedPlan plan = sim::resolve_plan(c.plan, c.model, c.cluster);
  const topologies::Topology topology(c.cluster);
  const sim::CostModels costs(topology, plan.precision.dtype);
  sim::DesOptions options;
  options.timeline = false;
  pb::SimResult r;
  for (auto _ : state) r = sim::simulate_des(plan, costs, options).result;
  state.counters["step_s"] = r.step_time_s();
  state.counters["events"] = static_cast<double>(r.events());
  state.counters["events_per_s"] = r.wall_time_s() > 0 ? static_cast<double>(r.events()) / r.wall_time_s() : 0;
}

template <Case (*Make)()>
void BM_Resolve(benchmark::State& state) {
  const Case c = Make();
  for (auto _ : state) benchmark::DoNotOptimize(sim::resolve_plan(c.plan, c.model, c.cluster));
}

template <Case (*Make)()>
void BM_Memory(benchmark::State& state) {
  const Case c = Make();
  const sim::ResolvedPlan plan = sim::resolve_plan(c.plan, c.model, c.cluster);
  for (auto _ : state) benchmark::DoNotOptimize(sim::memory_per_stage(plan));
}

template <Case (*Make)()>
void BM_LowerRepresentatives(benchmark::State& state) {
  const Case c = Make();
  const sim::ResolvedPlan plan = sim::resolve_plan(c.plan, c.model, c.cluster);
  sim::LowerOptions options;
  options.ranks = sim::representative_ranks(plan);
  int64_t nodes = 0;
  for (auto _ : state) {
    const auto g = sim::lower(plan, options);
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

BENCHMARK(BM_Analytic<llama70b_1024>)->Name("analytic/llama3-70b/1024xH100")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Analytic<llama405b_16384>)->Name("analytic/llama3-405b/16384xH100")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Des<llama70b_1024>)->Name("des/llama3-70b/1024xH100")->Unit(benchmark::kSecond)->Iterations(3);
BENCHMARK(BM_Des<llama405b_16384>)->Name("des/llama3-405b/16384xH100")->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(BM_Resolve<llama405b_16384>)->Name("resolve_plan/llama3-405b/16384xH100")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memory<llama405b_16384>)->Name("memory/llama3-405b/16384xH100")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerRepresentatives<llama70b_1024>)->Name("lower_representatives/llama3-70b/1024xH100")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LowerRepresentatives<llama405b_16384>)->Name("lower_representatives/llama3-405b/16384xH100")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Topology<llama405b_16384>)->Name("topology/dgx-h100/16384")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
