// Which ranks a symmetric des run simulates (representatives, des_internal.hpp).
//
// Ranks that differ only in their tp index or data-parallel replica run the same program at
// the same times, so the ranks with tp = dp = 0 stand for all (des_engine.hpp). Context
// parallelism can be folded the same way: the ring attention Megatron runs is load-balanced
// (each cp rank holds two mirrored chunks of the causal sequence, so every rank computes
// 1/cp of the attention at every ring step, lower_layer.cpp), so the cp ranks of one ring run
// the same program too, each sending to its successor what it receives from its predecessor,
// at the same instants. That only holds when the ring's hops cost the same: a ring that runs
// partly over NVLink and partly over the network waits for its slow hops, and its ranks no
// longer keep step. So cp = 0 stands for its ring only when
//   - every hop (cp rank c to c + 1, on every pipeline stage) costs what the first one costs on
//     an idle fabric (the collective model's point-to-point time, compared at 1 KiB, 1 MiB and
//     1 GiB: same route class, latency and bandwidth), and the ring's devices are of one kind;
//   - no expert parallelism nor MoE folding: expert groups are carved from the (dp, cp) plane
//     (or the folded tp x cp x dp grid) and a cp shift does not map them onto each other.
// Contention the ring meets is kept: its flows still run on their real routes, and the other
// rings' flows are mirror copies on the links they share with simulated traffic (des_symmetry.cpp).
#include <algorithm>
#include <cmath>
#include <set>

#include "des_internal.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::sim::des {
namespace {

// Every hop of every stage's ring costs what stage 0's first hop costs, on devices of one kind.
bool uniform_rings(const plan::ResolvedPlan& plan, const CostModels& costs,
                   const plan::RankLayout& layout) {
  constexpr double kSizes[] = {1024.0, 1024.0 * 1024, 1024.0 * 1024 * 1024};
  const int64_t cp = plan.degrees.cp;
  const auto& model = costs.collectives();
  const std::string& kind = plan::device_of(plan, 0).name();
  std::vector<double> first;
  for (int64_t p = 0; p < plan.degrees.pp; ++p) {
    for (int64_t c = 0; c < cp; ++c) {
      const int64_t from = layout.rank({0, c, 0, p}), to = layout.rank({0, (c + 1) % cp, 0, p});
      if (plan::device_of(plan, from).name() != kind) return false;
      const int64_t a = plan.device_of_rank[static_cast<size_t>(from)];
      const int64_t b = plan.device_of_rank[static_cast<size_t>(to)];
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        const double t = model.p2p_seconds(a, b, kSizes[i]);
        if (first.size() <= i) first.push_back(t);
        if (std::abs(t - first[i]) > 1e-9 * first[i]) return false;
      }
    }
  }
  return true;
}

}  // namespace

Representatives representatives(const plan::ResolvedPlan& plan, const CostModels& costs,
                                bool fold_cp) {
  const plan::RankLayout layout = plan::rank_layout(plan);
  Representatives out;
  out.fold_cp = fold_cp && plan.degrees.cp > 1 && plan.degrees.ep == 1 && !plan.degrees.folded() &&
                uniform_rings(plan, costs, layout);
  for (int64_t r = 0; r < plan.world_size(); ++r) {
    const plan::RankCoord c = layout.coord(r);
    if (c.tp == 0 && c.dp == 0 && (c.cp == 0 || !out.fold_cp)) out.ranks.push_back(r);
  }
  return out;
}

bool every_rank(const plan::ResolvedPlan& plan, const CostModels& costs,
                const DesOptions& options) {
  if (options.all_ranks || !plan.uniform_stages()) return true;
  const auto& topology = costs.topology();
  std::set<int64_t> nodes;
  for (int64_t d : plan.device_of_rank) nodes.insert(topology.device(d).node);
  for (const pb::Straggler& s : topology.spec().stragglers()) {
    if (s.has_gpu() && std::find(plan.device_of_rank.begin(), plan.device_of_rank.end(), s.gpu()) !=
                           plan.device_of_rank.end())
      return true;
    if (s.has_nic() && nodes.contains(s.node())) return true;
  }
  return false;
}

}  // namespace orrery::sim::des
