// The des engine's parts (see orrery/sim/des_engine.hpp for the model):
//   des_routes.cpp       Router: the route each flow takes, as topology edge ids
//   des_collectives.cpp  FlowPlan: what a collective or a transfer sends (alpha, beta, flows)
//   des_representatives.cpp  which ranks a symmetric run simulates (tp = dp = 0; cp = 0 too
//                        when the cp ring is uniform)
//   des_symmetry.cpp     sites, mirror copies, the link multiset per operation
//   des_platform.cpp     the SimGrid platform: configuration, hosts, links, the flow zone
//   des_actors.cpp       the actors that run the graph; completion check
//   des_timeline.cpp     SimResult from the timeline (breakdown of the critical rank)
//   des_estimate.cpp     des_estimate and the budget check, before the engine process starts
//   des_memory_limit.cpp the engine process's address-space limit behind the budget
//   des_engine.cpp       simulate_des: the engine in its own process (orrery-des, des_main.cpp)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"
#include "orrery/plan/resolved_plan.hpp"
#include "orrery/sim/cost_models.hpp"
#include "orrery/sim/des_engine.hpp"
#include "orrery/sim/sim_output.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::sim::des {

// --- routes ----------------------------------------------------------------------------------
// The route of a flow between two devices, as ids of topology edges. Routes follow orrery's
// routing rules (fewest hops, then lowest latency; NVLink only inside an NVLink fabric; devices
// never forward). Between nodes the route is assembled from cached pieces (device to NIC inside
// the source node, NIC to NIC over the fabric switches, NIC to device) so that tens of thousands
// of routes on a 16K-GPU fabric cost milliseconds; among equal-cost choices a GPU uses its own
// NIC (NCCL's GPU/NIC affinity) and spines are spread by a hash of the pair (ECMP).
class Router {
 public:
  explicit Router(const topologies::Topology& topology);
  ~Router();
  // src == dst: the device's two links to and from its NVSwitch (NVLS), empty without one.
  const std::vector<int32_t>& route(int64_t src, int64_t dst);
  const topologies::LinkInfo& link(int32_t edge) const;
  // A link between fabric switches (leaf, spine, core): routes pick among these by a hash of
  // the device pair, so a translation of the devices does not map them onto each other.
  bool between_switches(int32_t edge) const;
  int32_t num_edges() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --- flow plans ------------------------------------------------------------------------------
// One communication operation on an idle fabric: `alpha_s`, then its flows all at once, each
// of `flow_bytes`, each alone taking `beta_s`. Flows are pairs of positions in the operation's
// member list (a pair (i, i) is member i's NVLS round trip through its NVSwitch); a pair may
// repeat (several channels over one link pair).
struct FlowPlan {
  double alpha_s = 0;
  double beta_s = 0;
  double flow_bytes = 0;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::string algorithm, protocol;
};
FlowPlan collective_plan(const CollectiveCostModel& model, pb::CollectiveKind kind,
                         const std::vector<int64_t>& devices, double bytes);
FlowPlan p2p_plan(const CollectiveCostModel& model, int64_t src_device, int64_t dst_device,
                  double bytes);

// --- the run's model -------------------------------------------------------------------------
// One distinct communication operation of the simulated ranks (a collective on one group with
// one kind and size, or the transfers between one sender and receiver of one size).
struct Site {
  FlowPlan plan;
  std::string dim;                  // "tp", "dp", "pp", "cp", "ep", ... for the breakdown
  int64_t simulated_members = 0;    // ranks that must arrive before it starts
  std::vector<int32_t> links;       // edge multiset: its flows and the mirrors that were added,
                                    // less the links no other group or pair ever uses
  double max_rate_bytes_per_s = 0;  // what those private links allow (0: no limit)
  int64_t mirrors = 0;              // mirror copies added
};

struct Model {
  pb::ExecGraph graph;          // the simulated ranks (the timeline is written into it)
  std::vector<int64_t> device;  // per simulated rank (index into graph.ranks)
  std::vector<std::vector<int32_t>> site_of_node;  // per rank, per node: site or -1
  // Per rank, per node: a collective's occurrence on its group; a transfer's rendezvous pair
  // sender x world_size + receiver (shifted along a folded cp ring, des_symmetry.cpp).
  std::vector<std::vector<int64_t>> seq_of_node;
  std::vector<Site> sites;
  int64_t world_size = 0;
  int64_t mirror_copies = 0;
  bool cp_folded = false;  // cp = 0 stands for its whole ring
};

// --- symmetry --------------------------------------------------------------------------------
// The ranks a symmetric run simulates: tp = dp = 0, one per (cp, pp) index; with `fold_cp`
// (DesOptions::fold_cp) and a uniform cp ring, one per pp index (cp = 0; `fold_cp` says so).
struct Representatives {
  std::vector<int64_t> ranks;
  bool fold_cp = false;
};
Representatives representatives(const plan::ResolvedPlan& plan, const CostModels& costs,
                                bool fold_cp);
// Whether a run of the plan's own graph simulates every rank: asked to (all_ranks), stages
// with their own degrees (no grid to translate), or a straggler on a device or node the plan
// uses (a slow GPU or a degraded NIC breaks the symmetry of its class, so no rank may stand
// for it and its mirrors).
bool every_rank(const plan::ResolvedPlan& plan, const CostModels& costs, const DesOptions& options);

// Lowers (or takes, options.graph) the graph, picks the simulated ranks, plans and routes every
// operation and decides its mirrors. options.all_ranks disables the symmetry.
Model build_model(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options, Router& router);

// --- running ---------------------------------------------------------------------------------
struct RunStats {
  int64_t events = 0;
  double makespan_s = 0;
  std::vector<double> dispatch_s;  // per simulated rank: the dispatch overhead it slept
};
// Runs the SimGrid engine on the model (once per process) and writes start_s/duration_s into
// model.graph. Throws InputError naming the stuck nodes when the graph cannot complete.
// `chain_compute`: DesOptions::chain_compute.
RunStats run_engine(Model& model, const CostModels& costs, const plan::ResolvedPlan& plan,
                    Router& router, bool chain_compute);

// Fills step time, breakdown (critical rank), memory and throughput.
pb::SimResult make_result(const plan::ResolvedPlan& plan, const Model& model,
                          const RunStats& stats);

// In the engine's process (orrery-des): limits its address space to what it has plus
// memory_limit_bytes(options), and makes an allocation past that write 'B' <reason> to `fd`
// and exit (des_memory_limit.cpp).
double memory_limit_bytes(const DesOptions& options);
void limit_memory(const DesOptions& options, int fd);

// Throws DesOverBudget when des_estimate exceeds options.max_nodes (des_estimate.cpp). A
// symmetric run is left to the engine process, which counts the graph it lowers anyway
// (check_lowered_budget, from build_model), so its graph is lowered once, not twice.
void check_budget(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options);
// Throws DesOverBudget when the graph's nodes exceed max_nodes (0: no limit), with
// check_budget's message.
void check_lowered_budget(const pb::ExecGraph& graph, int64_t max_nodes);
void refuse_over_budget(const DesEstimate& e, int64_t max_nodes);

}  // namespace orrery::sim::des
