// build_model (des_internal.hpp): the simulated ranks, one Site per distinct communication
// operation, and the symmetry's mirror copies (see des_engine.hpp).
//
// Mirrors. The translations (tp + a, dp + k), and cp + c when the cp ring is folded
// (des_representatives.cpp), map the program of a simulated rank onto the program of every
// other rank of its pipeline stage. A site's copy under a translation is the group (same dim)
// holding the translated first member, or the translated sender/receiver pair; copies that a
// simulated rank runs itself (a group with a simulated member, a transfer from a simulated
// sender) are skipped. A copy is added to its site's action when one of its links carries
// simulated traffic: a copy on links of its own sees, by symmetry, exactly what the simulated
// copy sees and would change nothing.
//
// Folded cp rings. Only cp = 0 is simulated; its ring transfers go to its real successor, whose
// receive is, by the symmetry, the simulated rank's own receive from its predecessor at the
// same instant. So a transfer from a rank left out is shifted along the ring until its sender
// is simulated: the receive from the predecessor meets the simulated rank's own send of the
// same tag, both arrivals come from the one rank, and the flow runs on the real route to the
// successor. The predecessor's flow into the simulated rank is a mirror copy like any other.
//
// Private links. A link that only one group (or one sender/receiver pair) ever uses carries one
// of its operations at a time (a group's operations share a stream), so it can only bound that
// operation's rate: such links are folded into the operation's rate cap (capacity / flows of the
// operation on it) and left out of its SimGrid action, which keeps the max-min system small.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "des_internal.hpp"
#include "orrery/base/error.hpp"
#include "orrery/plan/lower.hpp"
#include "orrery/plan/rank_layout.hpp"

namespace orrery::sim::des {
namespace {

std::string breakdown_dim(const std::string& dim) {
  if (dim == "tp" || dim == "cp" || dim == "ep" || dim == "pp") return dim;
  if (dim == "etp") return "ep";  // the folded experts' TP collectives: expert communication
  return "dp";
}

struct GroupIndex {
  std::unordered_map<int64_t, const pb::ProcessGroup*> by_id;
  std::map<std::string, std::unordered_map<int64_t, int64_t>> of_rank;  // dim -> rank -> id
  explicit GroupIndex(const pb::ExecGraph& g) {
    for (const auto& pg : g.process_groups()) {
      by_id[pg.id()] = &pg;
      auto& m = of_rank[pg.dim()];
      for (int64_t r : pg.ranks()) m[r] = pg.id();
    }
  }
  const pb::ProcessGroup& at(int64_t id, const std::string& where) const {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      throw base::InputError(
          "", 0, where + ".process_group",
          "process group " + std::to_string(id) + " is not in the graph's process_groups");
    }
    return *it->second;
  }
};

// Builds sites and mirrors over one graph.
class ModelBuilder {
 public:
  ModelBuilder(const plan::ResolvedPlan& plan, const CostModels& costs, bool symmetric,
               bool fold_cp, Router& router, Model& m)
      : plan_(plan),
        costs_(costs),
        symmetric_(symmetric),
        fold_cp_(fold_cp),
        router_(router),
        m_(m),
        groups_(m.graph),
        layout_(plan::rank_layout(plan)) {
    for (int64_t r = 0; r < plan.world_size(); ++r)
      device_[r] = plan.device_of_rank[static_cast<size_t>(r)];
    for (int i = 0; i < m.graph.ranks_size(); ++i) {
      const auto& rg = m.graph.ranks(i);
      index_[rg.rank()] = i;
      device_[rg.rank()] = rg.device();
      m.device.push_back(rg.device());
    }
  }

  void build() {
    for (int i = 0; i < m_.graph.ranks_size(); ++i) assign_sites(i);
    route_and_mirror();
  }

 private:
  struct Pending {
    std::vector<int64_t> members;  // ranks, group order (sender, receiver for a transfer)
    std::string dim;               // group dim, "" for a transfer
    int64_t group = -1;
  };

  int64_t device(int64_t rank, const std::string& where) const {
    auto it = device_.find(rank);
    if (it == device_.end()) {
      throw base::InputError("", 0, where,
                             "rank " + std::to_string(rank) + " has no device (world size " +
                                 std::to_string(plan_.world_size()) + ")");
    }
    return it->second;
  }

  std::vector<int64_t> devices(const std::vector<int64_t>& ranks, const std::string& where) const {
    std::vector<int64_t> out;
    for (int64_t r : ranks) out.push_back(device(r, where));
    return out;
  }

  void assign_sites(int i) {
    const auto& rg = m_.graph.ranks(i);
    auto& sites = m_.site_of_node.emplace_back(static_cast<size_t>(rg.nodes_size()), -1);
    auto& seqs = m_.seq_of_node.emplace_back(static_cast<size_t>(rg.nodes_size()), -1);
    std::unordered_map<int64_t, int64_t> occurrences;
    for (int j = 0; j < rg.nodes_size(); ++j) {
      const auto& n = rg.nodes(j);
      const std::string where = "ranks[" + std::to_string(i) + "].nodes[" + std::to_string(j) + "]";
      ORRERY_CHECK(n.id() == j, "node ids must be their positions in the rank's list");
      if (n.kind() == pb::NODE_KIND_COLLECTIVE) {
        if (n.process_group() < 0) continue;
        seqs[static_cast<size_t>(j)] = occurrences[n.process_group()]++;
        sites[static_cast<size_t>(j)] = collective_site(n, where);
      } else if (n.kind() == pb::NODE_KIND_SEND || n.kind() == pb::NODE_KIND_RECV) {
        const bool send = n.kind() == pb::NODE_KIND_SEND;
        auto [from, to] = send ? std::pair(rg.rank(), n.peer()) : std::pair(n.peer(), rg.rank());
        if (fold_cp_ && !index_.contains(from)) std::tie(from, to) = along_ring(from, to);
        if (!index_.contains(fold_cp_ ? from : n.peer())) {
          throw base::InputError("", 0, where + ".peer",
                                 "peer rank " + std::to_string(n.peer()) + " of '" + n.name() +
                                     "' is not simulated (not in the graph)");
        }
        const bool cp = n.stream() == plan::kCommCpSend || n.stream() == plan::kCommCpRecv;
        seqs[static_cast<size_t>(j)] = from * plan_.world_size() + to;
        sites[static_cast<size_t>(j)] = transfer_site(from, to, n.comm_bytes(), cp, where);
      }
    }
  }

  // The pair shifted along the cp ring until the sender has cp index 0 (see the top).
  std::pair<int64_t, int64_t> along_ring(int64_t from, int64_t to) const {
    const int64_t shift = (plan_.degrees.cp - layout_.coord(from).cp) % plan_.degrees.cp;
    return {translate(from, 0, 0, shift), translate(to, 0, 0, shift)};
  }

  int32_t collective_site(const pb::ExecNode& n, const std::string& where) {
    uint64_t bits;
    const double bytes = n.comm_bytes();
    std::memcpy(&bits, &bytes, sizeof bits);
    // Collectives issued in line with compute (kind 2) pay the calibrated blocking overhead too
    // (collective_cost.hpp), so they are sites apart from the same collective on a comm stream.
    const bool blocking = plan::is_blocking_collective(n);
    const auto key = std::make_tuple(blocking ? 2 : 0, n.process_group(),
                                     static_cast<int64_t>(n.collective()), bits);
    if (auto it = keys_.find(key); it != keys_.end()) return it->second;
    const pb::ProcessGroup& pg = groups_.at(n.process_group(), where);
    Pending p{{pg.ranks().begin(), pg.ranks().end()}, pg.dim(), pg.id()};
    Site s;
    s.dim = breakdown_dim(pg.dim());
    for (int64_t r : p.members) s.simulated_members += index_.contains(r) ? 1 : 0;
    const std::vector<int64_t> group_devices = devices(p.members, where);
    s.plan = collective_plan(costs_.collectives(), n.collective(), group_devices, bytes);
    if (blocking)
      s.plan.alpha_s += costs_.collectives().blocking_overhead_s(n.collective(), group_devices);
    return add(key, std::move(s), std::move(p));
  }

  int32_t transfer_site(int64_t from, int64_t to, double bytes, bool cp, const std::string& where) {
    uint64_t bits;
    std::memcpy(&bits, &bytes, sizeof bits);
    const auto key = std::make_tuple(1, from, to, bits);
    if (auto it = keys_.find(key); it != keys_.end()) return it->second;
    Site s;
    s.dim = cp ? "cp" : "pp";
    s.simulated_members = 2;
    s.plan = p2p_plan(costs_.collectives(), device(from, where), device(to, where), bytes);
    return add(key, std::move(s), Pending{{from, to}, "", -1});
  }

  int32_t add(const std::tuple<int, int64_t, int64_t, uint64_t>& key, Site s, Pending p) {
    const auto id = static_cast<int32_t>(m_.sites.size());
    m_.sites.push_back(std::move(s));
    pending_.push_back(std::move(p));
    keys_.emplace(key, id);
    return id;
  }

  std::vector<int32_t> edges_of(const FlowPlan& plan, const std::vector<int64_t>& ranks) {
    std::vector<int32_t> out;
    for (const auto& [a, b] : plan.pairs) {
      const auto& r = router_.route(device_.at(ranks[static_cast<size_t>(a)]),
                                    device_.at(ranks[static_cast<size_t>(b)]));
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }

  int64_t translate(int64_t rank, int64_t a, int64_t k, int64_t shift) const {
    plan::RankCoord c = layout_.coord(rank);
    c.tp = (c.tp + a) % plan_.degrees.tp;
    c.dp = (c.dp + k) % plan_.degrees.dp;
    c.cp = (c.cp + shift) % plan_.degrees.cp;
    return layout_.rank(c);
  }

  struct Copy {
    std::vector<int64_t> ranks;
    bool cp_shifted = false;  // along the cp ring
    bool dp_shifted = false;  // to another data-parallel replica, by dp_period_ or more
  };

  // Whether every shift along dp (cp) maps site `s`'s group onto itself: the gradient groups.
  bool invariant(size_t s, bool along_dp) const {
    const Pending& p = pending_[s];
    if (p.group < 0) return false;
    const auto& of_rank = groups_.of_rank.at(p.dim);
    const int64_t n = along_dp ? plan_.degrees.dp : plan_.degrees.cp;
    for (int64_t k = 1; k < n; ++k) {
      const int64_t shifted =
          along_dp ? translate(p.members.front(), 0, k, 0) : translate(p.members.front(), 0, 0, k);
      auto it = of_rank.find(shifted);
      if (it == of_rank.end() || it->second != p.group) return false;
    }
    return true;
  }

  // Ranks of each copy of site `s` that no simulated rank runs itself.
  std::vector<Copy> copies(size_t s) const {
    const Pending& p = pending_[s];
    std::vector<Copy> out;
    std::set<std::vector<int64_t>> seen;
    const int64_t shifts = fold_cp_ ? plan_.degrees.cp : 1;
    for (int64_t a = 0; a < plan_.degrees.tp; ++a) {
      for (int64_t k = 0; k < plan_.degrees.dp; ++k) {
        for (int64_t c = 0; c < shifts; ++c) {
          if (a == 0 && k == 0 && c == 0) continue;
          std::vector<int64_t> ranks;
          if (p.group >= 0) {
            const auto& of_rank = groups_.of_rank.at(p.dim);
            auto it = of_rank.find(translate(p.members.front(), a, k, c));
            if (it == of_rank.end()) continue;
            const auto& pg = *groups_.by_id.at(it->second);
            ranks.assign(pg.ranks().begin(), pg.ranks().end());
            const auto simulated = [&](int64_t r) { return index_.contains(r); };
            if (std::any_of(ranks.begin(), ranks.end(), simulated)) continue;
          } else {
            ranks = {translate(p.members[0], a, k, c), translate(p.members[1], a, k, c)};
            if (index_.contains(ranks[0])) continue;
          }
          if (seen.insert(ranks).second) out.push_back({std::move(ranks), c != 0, k >= dp_period_});
        }
      }
    }
    return out;
  }

  void route_and_mirror() {
    std::vector<char> busy(static_cast<size_t>(router_.num_edges()), 0);
    owner_.assign(static_cast<size_t>(router_.num_edges()), kNoOwner);
    for (size_t s = 0; s < m_.sites.size(); ++s) {
      Site& site = m_.sites[s];
      site.links = edges_of(site.plan, pending_[s].members);
      for (int32_t e : site.links) busy[static_cast<size_t>(e)] = 1;
      own(pending_[s].members, site.links);
    }
    if (symmetric_) add_mirrors(busy);
    fold_private_links();
  }

  // Owner of each edge: the member list of the one group or pair using it, or shared.
  void own(const std::vector<int64_t>& ranks, const std::vector<int32_t>& edges) {
    auto [it, fresh] = owner_ids_.emplace(ranks, static_cast<int32_t>(owner_ids_.size()));
    for (int32_t e : edges) {
      int32_t& o = owner_[static_cast<size_t>(e)];
      o = o == kNoOwner || o == it->second ? it->second : kShared;
    }
    (void)fresh;
  }

  void fold_private_links() {
    for (size_t s = 0; s < m_.sites.size(); ++s) {
      Site& site = m_.sites[s];
      std::unordered_map<int32_t, int> count;
      for (int32_t e : site.links) ++count[e];
      std::vector<int32_t> kept;
      double rate = 0;
      for (int32_t e : site.links) {
        if (owner_[static_cast<size_t>(e)] == kShared) {
          kept.push_back(e);
          continue;
        }
        const double r = router_.link(e).bandwidth_bytes_per_s / count[e];
        rate = rate > 0 ? std::min(rate, r) : r;
      }
      site.links = std::move(kept);
      site.max_rate_bytes_per_s = rate;
    }
  }

  // Whether the dp shift by `k` maps site `s`'s flows, as device pairs, onto themselves.
  bool flows_invariant(size_t s, int64_t k) const {
    const Pending& p = pending_[s];
    std::vector<std::pair<int64_t, int64_t>> mine, shifted;
    for (const auto& [a, b] : m_.sites[s].plan.pairs) {
      const int64_t ra = p.members[static_cast<size_t>(a)], rb = p.members[static_cast<size_t>(b)];
      mine.emplace_back(device_.at(ra), device_.at(rb));
      shifted.emplace_back(device_.at(translate(ra, 0, k, 0)), device_.at(translate(rb, 0, k, 0)));
    }
    std::sort(mine.begin(), mine.end());
    std::sort(shifted.begin(), shifted.end());
    return mine == shifted;
  }

  // The smallest dp shift (a divisor of dp) that maps the flows of every group that dp shifts
  // map onto itself (the gradient groups) onto themselves. A ring of two replicas per node
  // leaves and enters each node at fixed members, so its flows repeat only every node: 2.
  int64_t dp_period() const {
    const int64_t dp = plan_.degrees.dp;
    std::vector<size_t> gradient_sites;
    for (size_t s = 0; s < m_.sites.size(); ++s) {
      if (invariant(s, true)) gradient_sites.push_back(s);
    }
    for (int64_t g = 1; g < dp; ++g) {
      if (dp % g != 0) continue;
      const auto same = [&](size_t s) { return flows_invariant(s, g); };
      if (std::all_of(gradient_sites.begin(), gradient_sites.end(), same)) return g;
    }
    return dp;
  }

  // Links of the simulated sites that a shift along dp (or cp) does not map onto themselves.
  std::vector<char> variant_links(bool along_dp) const {
    std::vector<char> variant(static_cast<size_t>(router_.num_edges()), 0);
    for (size_t s = 0; s < m_.sites.size(); ++s) {
      if (invariant(s, along_dp)) continue;
      for (int32_t e : m_.sites[s].links) variant[static_cast<size_t>(e)] = 1;
    }
    return variant;
  }

  // Links between switches are chosen by a hash of the device pair, not translated with the
  // devices: there a copy shifted to another replica meets what no other copy's image meets (an
  // ECMP collision with the dp ring), so it is kept wherever simulated traffic runs.
  template <typename Candidate>
  bool hashed(const Candidate& c, int32_t e) const {
    return c.dp_shifted && !c.cp_shifted && router_.between_switches(e);
  }

  void add_mirrors(std::vector<char>& busy) {
    struct Candidate {
      size_t site;
      std::vector<int64_t> ranks;
      std::vector<int32_t> edges;
      bool cp_shifted, dp_shifted;
    };
    dp_period_ = dp_period();
    std::vector<Candidate> candidates;
    for (size_t s = 0; s < m_.sites.size(); ++s) {
      if (m_.sites[s].plan.pairs.empty()) continue;
      for (auto& copy : copies(s)) {
        std::vector<int32_t> edges = edges_of(m_.sites[s].plan, copy.ranks);
        candidates.push_back(
            {s, std::move(copy.ranks), std::move(edges), copy.cp_shifted, copy.dp_shifted});
      }
    }
    // One pass: a copy adds its load only on the links it shares with simulated traffic. Its
    // other links carry nothing the simulation contends with (copies are identical in time to
    // the operation they mirror, so copy-on-copy contention elsewhere repeats what the
    // simulated ranks already see); leaving them out keeps each transfer's link list short,
    // which is what the max-min solver's cost grows with.
    const std::vector<char> simulated = busy;
    // A copy shifted along a folded cp ring, or by dp_period_ or more replicas, meets on the
    // links of a group whose flows the shift maps onto themselves (the gradient group over dp x
    // cp) the image of what a copy shifted less (or the simulated operation) meets: the same
    // constraint twice, which changes no max-min rate. Such a copy is added only where traffic that
    // is not shift-invariant runs (pipeline transfers, the simulated rank's own ring and TP
    // traffic). Without the dp rule a pipeline transfer of a dp-336 plan carried ~570 copies on the
    // dp ring's links, and SimGrid's max-min update grew with them (docs/simulator.md, des at
    // scale).
    const std::vector<char> variant_cp =
        fold_cp_ ? variant_links(false) : std::vector<char>(simulated.size(), 0);
    const std::vector<char> variant_dp = variant_links(true);
    for (auto& c : candidates) {
      const std::vector<char>& meets = c.cp_shifted   ? variant_cp
                                       : c.dp_shifted ? variant_dp
                                                      : simulated;
      std::vector<int32_t> shared;
      for (int32_t e : c.edges) {
        if (meets[static_cast<size_t>(e)] != 0 ||
            (hashed(c, e) && simulated[static_cast<size_t>(e)] != 0))
          shared.push_back(e);
      }
      if (shared.empty()) continue;
      Site& site = m_.sites[c.site];
      site.links.insert(site.links.end(), shared.begin(), shared.end());
      ++site.mirrors;
      ++m_.mirror_copies;
      own(c.ranks, shared);
    }
  }

  const plan::ResolvedPlan& plan_;
  const CostModels& costs_;
  bool symmetric_, fold_cp_;
  Router& router_;
  Model& m_;
  GroupIndex groups_;
  plan::RankLayout layout_;
  std::unordered_map<int64_t, int64_t> device_;
  std::unordered_map<int64_t, int> index_;  // simulated rank -> graph index
  std::map<std::tuple<int, int64_t, int64_t, uint64_t>, int32_t> keys_;
  std::vector<Pending> pending_;
  static constexpr int32_t kNoOwner = -1, kShared = -2;
  std::map<std::vector<int64_t>, int32_t> owner_ids_;
  std::vector<int32_t> owner_;  // per edge: owner id, kNoOwner or kShared
  int64_t dp_period_ = 1;       // dp_period(), set before the copies are enumerated
};

}  // namespace

Model build_model(const plan::ResolvedPlan& plan, const CostModels& costs,
                  const DesOptions& options, Router& router) {
  Model m;
  m.world_size = plan.world_size();
  const pb::ExecGraph* given = options.graph;
  // Symmetry translates (tp, dp) inside a grid all stages share (every_rank says when not).
  const bool symmetric = given == nullptr && !every_rank(plan, costs, options);
  if (given != nullptr) {
    m.graph = *given;
  } else {
    plan::LowerOptions lo;
    if (symmetric) {
      Representatives r = representatives(plan, costs, options.fold_cp);
      lo.ranks = std::move(r.ranks);
      m.cp_folded = r.fold_cp;
    }
    m.graph = plan::lower(plan, lo);
    // The budget of a symmetric run, checked here on the graph the estimate would count
    // (check_budget leaves it to this process), before the model grows from it.
    if (symmetric) check_lowered_budget(m.graph, options.max_nodes);
  }
  ModelBuilder(plan, costs, symmetric, m.cp_folded, router, m).build();
  return m;
}

}  // namespace orrery::sim::des
