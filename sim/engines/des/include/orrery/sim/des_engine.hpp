// The `des` engine: SimGrid discrete-event simulation of the lowered execution graph on the
// topology's links, so that concurrent transfers contend.
//
// Semantics (lower.hpp): per rank, each stream runs its nodes in list order; a node also waits
// for its data_deps; a collective starts when every member has reached it; a send and its recv
// start together when both have been reached. Compute nodes cost costs.compute() on the rank's
// device and slow down by costs.overlap_slowdown() while any communication of that rank runs;
// a transfer slows down by costs.overlap_comm_slowdown() while any member of its group computes.
//
// Communication. Every collective or transfer costs what the collective cost model says on an
// idle fabric: a fixed latency alpha (launch, per-step hop latencies; a SimGrid sleep) plus a
// bandwidth term beta, carried by the flows the algorithm really sends (des_collectives.cpp:
// ring neighbours per channel, tree edges, NVLS in-switch up/down links, all-to-all pairs, one
// flow per transfer). Each flow carries its real bytes with a rate cap of bytes / beta, so alone
// on the fabric it takes exactly beta (the engines agree on contention-free cases) and link
// capacity is shared max-min with every other flow. The flows of one operation progress in
// lockstep (a ring or tree runs at the pace of its slowest link), so they are handed to SimGrid
// as one action over the multiset of their links: one event per operation, however large.
//
// Symmetry (default). Ranks that differ only in their tp index or their data-parallel replica
// run the same program at the same times, so only the ranks with tp = dp = 0 (one per cp and pp
// index) are simulated; when the context-parallel ring is uniform (every hop costs the same on
// an idle fabric, no expert parallelism) its load-balanced ranks keep step too and cp = 0
// stands for the ring: one rank per pp index, whose ring transfers still go to its real
// neighbours on their real routes (des_representatives.cpp, des_symmetry.cpp). Everything they
// do is simulated with all its flows: a TP or DP collective launches the flows of every member,
// on the links those members really use. The operations of the ranks left out (other replicas'
// TP and pipeline traffic, other tp indices' DP rings, other cp indices' ring hops...) are
// mirror copies: translated by (tp, dp) (and cp, folded) onto their own devices and routed; each
// copy adds its load to the simulated operation's action on the links it shares with simulated
// flows, so contention that the topology really has on shared NIC, leaf, spine and core links is
// kept. A copy's other links are left out: copies run in step with the operation they mirror,
// so whatever they meet there (other copies) is, by the same symmetry, what the simulated flows
// meet on their own links. Keeping only shared links keeps each action's link list short, which
// is what SimGrid's max-min solver's cost grows with (a fixed-point merge of copy-on-copy
// contention made a 16,384-GPU llama3-405b step take 49 s instead of 2.4 s and moved its step
// time by under 1.5%). DesOptions::all_ranks simulates every rank instead (tests compare both).
//
// One engine per process: SimGrid 3.32 cannot run two engines in one process, so simulate_des
// forks, runs the engine in the child, and returns its SimOutput to the caller through a pipe
// (as a serialized protobuf). It can be called any number of times from one process.
#pragma once

#include "orrery/base/error.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/sim_output.hpp"

namespace orrery::sim {

struct DesOptions {
  // Simulate every rank instead of the representatives with mirrored traffic.
  bool all_ranks = false;
  // Let cp = 0 stand for a uniform cp ring (see above); false: one rank per (cp, pp) index.
  bool fold_cp = true;
  // Run a rank's consecutive compute nodes that no other stream waits for as one engine
  // activity when nothing slows its compute (no overlap slowdowns in the calibration); false:
  // one activity per node. Same step time; node times may differ in the last bits, where
  // SimGrid's clock rounds differently (docs/simulator.md, "Compute chains").
  bool chain_compute = true;
  // Run this graph instead of lowering the plan (hand-made cases, imported traces). Its ranks
  // are all simulated; their devices come from RankGraph.device and their process groups from
  // ExecGraph.process_groups. The plan still gives the device specs, memory and throughput.
  const pb::ExecGraph* graph = nullptr;
  // Return the timeline (the simulated ranks' graphs with start_s and duration_s).
  bool timeline = true;
  // Stop the engine after this many seconds of wall time (0: no limit) and throw DesTimedOut.
  double time_limit_s = 0;
  // Refuse (DesOverBudget) before anything is simulated when the estimate (des_estimate)
  // exceeds this many graph nodes (0: no limit): before the engine process starts, or for a
  // symmetric run in it, on the graph it lowers (the nodes des_estimate counts), so that the
  // graph is lowered once. The default keeps the engine's process under about 8 GiB.
  int64_t max_nodes = kDefaultDesBudget;
  static constexpr int64_t kDefaultDesBudget = 12'000'000;
  // The backstop behind the estimate: the engine process may grow its address space by this
  // many bytes past what it has when forked (RLIMIT_AS); running out throws DesOverBudget
  // instead of a crash or an OOM kill. 0: kDesMemoryHeadroom x max_nodes x kDesBytesPerNode,
  // at least kDesMemoryFloor (none when max_nodes is 0). Not applied in sanitizer builds, whose
  // shadow memory is address space.
  double memory_limit_bytes = 0;
};

// What a des run costs, estimated before it starts: the graph nodes of the simulated ranks
// (each is one or two engine events, and what the engine's memory grows with) and the memory
// they take. Lowers one rank per pipeline stage (milliseconds at 16K GPUs) and scales it by
// the ranks of that stage the run simulates.
struct DesEstimate {
  int64_t simulated_ranks = 0;
  int64_t nodes = 0;
  double memory_bytes = 0;
};
// Peak memory per simulated graph node: 590-620 bytes measured on the published runs with over
// 100,000 nodes (docs/simulator.md; the graph, the engine's per-node state, SimGrid's actions),
// rounded up.
inline constexpr double kDesBytesPerNode = 640;
// The engine's address-space limit over the budget's memory: address space runs ahead of
// resident memory (reserved actor stacks, allocator arenas), and a misestimate by up to this
// factor still completes.
inline constexpr double kDesMemoryHeadroom = 2;
// The least address space a budget-derived limit allows: a symmetric run lowers its graph in the
// engine process and only then checks the budget on it, so a small budget must leave room for
// that lowering (and SimGrid's start-up) for the refusal to name the budget, not the memory.
inline constexpr double kDesMemoryFloor = 1024.0 * 1024 * 1024;

// A des run refused by DesOptions::max_nodes: the reason names the estimate and the budget.
class DesOverBudget : public base::InputError {
 public:
  using base::InputError::InputError;
};

// A des run stopped at DesOptions::time_limit_s.
class DesTimedOut : public base::EnvironmentError {
 public:
  using base::EnvironmentError::EnvironmentError;
};

// How many ranks simulate_des(plan, costs, options) runs (what its cost grows with, together
// with each rank's micro-batches and layers); cheap, nothing is simulated.
int64_t des_simulated_ranks(const plan::ResolvedPlan& plan, const CostModels& costs,
                            const DesOptions& options = {});

DesEstimate des_estimate(const plan::ResolvedPlan& plan, const CostModels& costs,
                         const DesOptions& options = {});

// Throws DesOverBudget when des_estimate exceeds options.max_nodes; InputError when the graph
// cannot complete (a deadlock: the message names the stuck
// nodes) or is malformed (a peer or group member that is not simulated), InternalError when the
// engine process fails.
SimOutput simulate_des(const plan::ResolvedPlan& plan, const CostModels& costs,
                       const DesOptions& options = {});

}  // namespace orrery::sim
