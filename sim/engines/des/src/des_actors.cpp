// The actors that run the graph (run_engine, des_internal.hpp): one per (simulated rank, stream
// with nodes), each running its stream's nodes in order, blocking on data_deps, on the
// rendezvous of a collective (every simulated member) or of a send/recv pair, and on its own
// compute or communication. The last member to arrive at an operation runs it for everyone:
// alpha as a sleep, then one SimGrid action over the operation's links. While any operation of
// a rank runs, the rank's host sits in its slowed-down pstate, so its compute slows by
// overlap_slowdown; while any member of an operation's group computes, the operation's transfer
// runs overlap_comm_slowdown times slower (its actor's cap link, changed whenever a member starts
// or ends an op). Waiting is a per-actor semaphore, so a wake-up is never lost. Before each
// node of the compute stream the actor sleeps the rank's calibrated dispatch overhead (the host
// between ops), which is no node's time. With a calibrated rank skew a collective starts no
// earlier than its members launched it plus the expected lag of the slowest
// (ComputeCostModel::skew_wait_s) after the compute each ran since it last waited on the group:
// at a collective on its compute stream, or for one its compute stream needed unfinished.
#include <cmath>
#include <sstream>

#include "des_platform.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/statistics.hpp"
#include "orrery/plan/lower.hpp"

namespace orrery::sim::des {
namespace {

namespace s4u = simgrid::s4u;

struct PairHash {
  size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<int64_t>()(p.first * 1000003 ^ p.second);
  }
};

class Runner {
 public:
  Runner(Model& m, const CostModels& costs, const plan::ResolvedPlan& plan) : m_(m), costs_(costs) {
    for (int i = 0; i < m.graph.ranks_size(); ++i) {
      const auto& rg = m.graph.ranks(i);
      RankState& rs = ranks_.emplace_back();
      rs.done.assign(static_cast<size_t>(rg.nodes_size()), 0);
      rs.waiters.resize(static_cast<size_t>(rg.nodes_size()));
      rs.spec = &plan::device_of(plan, rg.rank());
      rs.dispatch_s = costs.compute().dispatch_s(*rs.spec);
      if (const pb::RankSkew* k = costs.compute().rank_skew(*rs.spec))
        rs.skew_cv = k->cv(), rs.skew_jitter_s = k->jitter_s();
      rs.sharing = costs.host_sharing(plan, rg.rank()) * costs.straggler_factor(rg.device());
      mark_chains(rs, rg);
      std::map<int32_t, size_t> by_stream;
      for (int j = 0; j < rg.nodes_size(); ++j) {
        const int32_t s = rg.nodes(j).stream();
        auto [it, fresh] = by_stream.emplace(s, streams_.size());
        if (fresh) streams_.push_back({static_cast<size_t>(i), s, {}});
        streams_[it->second].nodes.push_back(j);
      }
    }
    for (const auto& g : m.graph.process_groups()) {
      group_size_[g.id()] = g.ranks_size();
      if (skew_factor_.count(g.ranks_size()) == 0)
        skew_factor_[g.ranks_size()] = base::expected_max_of_normals(g.ranks_size());
    }
  }

  RunStats run(const Router& router, bool chain_compute) {
    Platform platform(m_, router, costs_.overlap_slowdown(), streams_.size());
    platform_ = &platform;
    chains_ = chain_compute && !platform.slowed() && comm_slowdown_ == 1.0;
    flights_.resize(streams_.size());
    for (size_t a = 0; a < streams_.size(); ++a) {
      wake_.push_back(s4u::Semaphore::create(0));
      const auto& st = streams_[a];
      actors_.push_back(s4u::Actor::create(
          "r" + std::to_string(m_.graph.ranks(static_cast<int>(st.rank)).rank()) + ".s" +
              std::to_string(st.stream),
          platform.rank_host(st.rank), [this, a] { run_stream(a); }));
    }
    s4u::Engine::get_instance()->run();
    platform_ = nullptr;
    if (!errors_.empty())
      throw base::InputError("", 0, errors_.front().first, errors_.front().second);
    check_complete();
    RunStats stats;
    stats.events = events_;
    stats.makespan_s = makespan_;
    for (const RankState& rs : ranks_) stats.dispatch_s.push_back(rs.dispatch_total_s);
    return stats;
  }

 private:
  struct StreamRun {
    size_t rank;
    int32_t stream;
    std::vector<int32_t> nodes;
    size_t next = 0;  // position reached
  };
  struct RankState {
    std::vector<char> done;
    std::vector<std::vector<size_t>> waiters;
    int active = 0;
    const pb::DeviceSpec* spec = nullptr;
    double dispatch_s = 0;        // before each compute-stream node (ComputeCostModel::dispatch_s)
    double dispatch_total_s = 0;  // slept so far
    double skew_cv = 0;           // ComputeCostModel::rank_skew
    double skew_jitter_s = 0;
    double sharing = 1;      // host_sharing x straggler_factor (CostModels): on every compute node
    double computed_s = 0;   // compute run so far
    bool computing = false;  // an op of the rank runs now
    std::vector<size_t> flying;  // the actors whose transfer the rank is a member of, in flight
    std::vector<char> observed;  // per node: another stream of the rank waits for it
    bool chains = false;         // its compute runs in chains (mark_chains)
    std::unordered_map<int64_t, double>
        waited_at;  // per group: computed_s when it last waited on it
  };
  struct Rendezvous {
    int32_t site = -1;
    int64_t arrived = 0;
    bool done = false;
    double start = 0, end = 0;
    std::vector<size_t> ranks, waiters;
    int64_t left = 0;     // members that have taken its start and end
    double launched = 0;  // the latest member's launch (its data dependencies met)
    double lag_s = 0;  // sum over the members of cv x compute since they last waited on the group
  };

  pb::ExecNode& node(size_t rank, int32_t j) {
    return *m_.graph.mutable_ranks(static_cast<int>(rank))->mutable_nodes(j);
  }

  void block(std::vector<size_t>& list, size_t actor) {
    list.push_back(actor);
    wake_[actor]->acquire();
  }
  void wake(std::vector<size_t>& list) {
    for (size_t a : list) wake_[a]->release();
    list.clear();
  }

  void run_stream(size_t a) {
    StreamRun& st = streams_[a];
    RankState& rs = ranks_[st.rank];
    for (; st.next < st.nodes.size(); ++st.next) {
      const int32_t j = st.nodes[st.next];
      double launched = s4u::Engine::get_clock();  // when its inputs were ready
      if (!node(st.rank, j).data_deps().empty()) launched = 0;
      for (int64_t d : node(st.rank, j).data_deps()) {
        if (d < 0 || d >= static_cast<int64_t>(rs.done.size())) {
          errors_.emplace_back(where(st.rank, j) + ".data_deps",
                               "dependency " + std::to_string(d) + " is not a node of this rank");
          return;
        }
        bool blocked = false;
        while (!rs.done[static_cast<size_t>(d)])
          block(rs.waiters[static_cast<size_t>(d)], a), blocked = true;
        const pb::ExecNode& dep = node(st.rank, static_cast<int32_t>(d));
        launched = std::max(launched, dep.start_s() + dep.duration_s());
        // The compute stream waited for a collective of another stream: its group is together.
        if (blocked && st.stream == plan::kCompute && dep.kind() == pb::NODE_KIND_COLLECTIVE &&
            dep.stream() != plan::kCompute)
          rs.waited_at[dep.process_group()] = rs.computed_s;
      }
      if (st.stream == plan::kCompute && rs.dispatch_s > 0) {
        s4u::this_actor::sleep_for(rs.dispatch_s);
        rs.dispatch_total_s += rs.dispatch_s;
        ++events_;
      }
      const double start = s4u::Engine::get_clock();
      double op_start = start, op_end;
      switch (node(st.rank, j).kind()) {
        case pb::NODE_KIND_COMPUTE:
          if (chains_ && rs.chains) {
            compute_chain(st);
            continue;
          }
          op_end = compute(st.rank, j);
          break;
        case pb::NODE_KIND_COLLECTIVE:
        case pb::NODE_KIND_SEND:
        case pb::NODE_KIND_RECV:
          std::tie(op_start, op_end) = rendezvous(a, st.rank, j, launched);
          break;
        default:
          errors_.emplace_back(where(st.rank, j) + ".kind", "a node needs a kind");
          return;
      }
      if (!errors_.empty()) return;
      pb::ExecNode& n = node(st.rank, j);
      if (plan::is_blocking_collective(n)) rs.waited_at[n.process_group()] = rs.computed_s;
      n.set_start_s(op_start);
      n.set_duration_s(op_end - op_start);
      makespan_ = std::max(makespan_, op_end);
      rs.done[static_cast<size_t>(j)] = 1;
      wake(rs.waiters[static_cast<size_t>(j)]);
    }
  }

  // Which of the rank's compute nodes no other stream waits for (a run of them ends only at the
  // first one another stream needs); a rank with compute on several streams shares its host's
  // CPU among them, so its compute stays one SimGrid execution per node.
  void mark_chains(RankState& rs, const pb::RankGraph& rg) {
    rs.observed.assign(static_cast<size_t>(rg.nodes_size()), 0);
    rs.chains = true;
    for (const pb::ExecNode& n : rg.nodes()) {
      if (n.kind() == pb::NODE_KIND_COMPUTE && n.stream() != plan::kCompute) rs.chains = false;
      for (int64_t d : n.data_deps()) {
        if (d >= 0 && d < rg.nodes_size() && rg.nodes(static_cast<int>(d)).stream() != n.stream())
          rs.observed[static_cast<size_t>(d)] = 1;
      }
    }
  }

  // Whether the stream's next node continues the compute chain ending at its current node: a
  // compute node that only the stream itself waits for, followed by a compute node whose inputs
  // are all earlier nodes of the same stream.
  bool chain_continues(const StreamRun& st) {
    if (st.next + 1 >= st.nodes.size()) return false;
    const int32_t j = st.nodes[st.next], k = st.nodes[st.next + 1];
    if (ranks_[st.rank].observed[static_cast<size_t>(j)]) return false;
    const pb::ExecNode& n = node(st.rank, k);
    if (n.kind() != pb::NODE_KIND_COMPUTE) return false;
    for (int64_t d : n.data_deps()) {
      if (d < 0 || d >= k || node(st.rank, static_cast<int32_t>(d)).stream() != st.stream)
        return false;
    }
    return true;
  }

  // Runs a chain of compute nodes with one SimGrid activity: nothing outside the stream sees the
  // nodes inside it, and without slowdowns or skew a node's time depends on nothing else, so
  // their boundaries are those SimGrid gives one execution per node (an Exec of s x 1e12 flops
  // at 1e12 flop/s ends (s x 1e12) / 1e12 after it starts; the dispatch sleep before each).
  void compute_chain(StreamRun& st) {
    RankState& rs = ranks_[st.rank];
    const size_t first = st.next;
    double t = s4u::Engine::get_clock();
    for (;; ++st.next) {
      pb::ExecNode& n = node(st.rank, st.nodes[st.next]);
      if (st.next > first && rs.dispatch_s > 0) {
        t += std::max(rs.dispatch_s, kSleepPrecisionS);
        rs.dispatch_total_s += rs.dispatch_s;
        ++events_;
      }
      const double seconds = rs.sharing * costs_.compute().seconds(*rs.spec, n);
      rs.computed_s += seconds;
      n.set_start_s(t);
      if (seconds > 0) {
        t += seconds * kFlopsPerSecond / kFlopsPerSecond;
        ++events_;
      }
      n.set_duration_s(t - n.start_s());
      if (!chain_continues(st)) break;
    }
    if (t > s4u::Engine::get_clock()) s4u::this_actor::sleep_until(t);
    for (size_t i = first; i <= st.next; ++i) {
      const auto j = static_cast<size_t>(st.nodes[i]);
      rs.done[j] = 1;
      wake(rs.waiters[j]);
    }
    makespan_ = std::max(makespan_, t);
  }

  std::string where(size_t rank, int32_t j) const {
    return "ranks[" + std::to_string(rank) + "].nodes[" + std::to_string(j) + "]";
  }

  double compute(size_t rank, int32_t j) {
    const double seconds =
        ranks_[rank].sharing * costs_.compute().seconds(*ranks_[rank].spec, node(rank, j));
    ranks_[rank].computed_s += seconds;
    if (seconds > 0) {
      set_computing(rank, true);
      s4u::this_actor::execute(seconds * kFlopsPerSecond);
      set_computing(rank, false);
      ++events_;
    }
    return s4u::Engine::get_clock();
  }

  // A transfer in flight, run by its actor: its members and its rate alone.
  struct Flight {
    std::vector<size_t> ranks;
    double rate_bytes_per_s = 0;
    bool slowed = false;
  };

  bool any_computing(const std::vector<size_t>& ranks) const {
    for (size_t r : ranks) {
      if (ranks_[r].computing) return true;
    }
    return false;
  }

  // The rank starts or ends an op: the transfers of its groups slow down or speed up.
  void set_computing(size_t rank, bool on) {
    ranks_[rank].computing = on;
    if (comm_slowdown_ == 1.0) return;
    for (size_t a : ranks_[rank].flying) {
      Flight& f = flights_[a];
      const bool slowed = any_computing(f.ranks);
      if (slowed == f.slowed) continue;
      f.slowed = slowed;
      platform_->set_rate(a, slowed ? f.rate_bytes_per_s / comm_slowdown_ : f.rate_bytes_per_s);
    }
  }

  std::pair<double, double> rendezvous(size_t a, size_t rank, int32_t j, double launched) {
    const pb::ExecNode& n = node(rank, j);
    const int32_t site = m_.site_of_node[rank][static_cast<size_t>(j)];
    if (site < 0) return {s4u::Engine::get_clock(), s4u::Engine::get_clock()};  // a group of one
    std::pair<int64_t, int64_t> key;
    if (n.kind() == pb::NODE_KIND_COLLECTIVE) {
      key = {n.process_group(), m_.seq_of_node[rank][static_cast<size_t>(j)]};
    } else {
      // The (sender, receiver) pair, as build_model keyed it.
      key = {-1 - m_.seq_of_node[rank][static_cast<size_t>(j)], n.tag()};
    }
    Rendezvous& rv = rendezvous_[key];
    if (rv.site < 0) rv.site = site;
    if (rv.site != site) {
      errors_.emplace_back(where(rank, j),
                           "'" + n.name() + "' does not match what its peers posted for the same " +
                               (n.kind() == pb::NODE_KIND_COLLECTIVE ? "collective" : "tag") +
                               " (kind, group or size differ)");
      return {0, 0};
    }
    rv.ranks.push_back(rank);
    if (n.kind() == pb::NODE_KIND_COLLECTIVE) {
      const RankState& rs = ranks_[rank];
      const auto waited = rs.waited_at.find(n.process_group());
      const double since = rs.computed_s - (waited == rs.waited_at.end() ? 0.0 : waited->second);
      if (since > 0) rv.lag_s += rs.skew_jitter_s + rs.skew_cv * since;
      rv.launched = std::max(rv.launched, launched);
    }
    const int64_t members = m_.sites[static_cast<size_t>(site)].simulated_members;
    if (++rv.arrived < members) {
      while (!rv.done && errors_.empty()) block(rv.waiters, a);
    } else {
      rv.start = s4u::Engine::get_clock();  // the wait for the slowest member is the collective's
      if (rv.lag_s > 0) {
        // The slowest of the group's members launches it the expected maximum lag late.
        const auto size = group_size_.find(n.process_group());
        const double factor = size == group_size_.end() ? 0 : skew_factor_.at(size->second);
        const double wait = rv.launched + factor * rv.lag_s / static_cast<double>(rv.arrived) -
                            s4u::Engine::get_clock();
        if (wait > 0) {
          s4u::this_actor::sleep_for(wait);
          ++events_;
        }
      }
      communicate(a, site, rv.ranks);
      rv.end = s4u::Engine::get_clock();
      rv.done = true;
      wake(rv.waiters);
    }
    const std::pair<double, double> span{rv.start, rv.end};
    // The last member to leave forgets the occurrence: a run keeps only those in progress, not
    // one entry per collective and transfer of the step (3 million on the longest pipelines).
    if (rv.done && ++rv.left == members) rendezvous_.erase(key);
    return span;
  }

  void set_active(size_t rank, int delta) {
    RankState& rs = ranks_[rank];
    const int before = rs.active;
    rs.active += delta;
    if (platform_->slowed() && (before == 0) != (rs.active == 0)) {
      platform_->rank_host(rank)->set_pstate(rs.active > 0 ? 1 : 0);
    }
  }

  void communicate(size_t a, int32_t site_index, const std::vector<size_t>& ranks) {
    const Site& site = m_.sites[static_cast<size_t>(site_index)];
    for (size_t r : ranks) set_active(r, +1);
    if (site.plan.alpha_s > 0) {
      // The latency takes the slowdown of the moment it starts (a sleep has no rate to change).
      s4u::this_actor::sleep_for(site.plan.alpha_s * (any_computing(ranks) ? comm_slowdown_ : 1.0));
      ++events_;
    }
    if (site.plan.beta_s > 0) {
      const double payload = std::max(1.0, std::round(site.plan.flow_bytes));
      double rate = payload / site.plan.beta_s;
      if (site.max_rate_bytes_per_s > 0) rate = std::min(rate, site.max_rate_bytes_per_s);
      if (comm_slowdown_ != 1.0) {
        // Every transfer is a SimGrid action, whose rate the members' compute changes while it
        // flies (set_computing).
        Flight& f = flights_[a];
        f = {ranks, rate, any_computing(ranks)};
        for (size_t r : ranks) ranks_[r].flying.push_back(a);
        // Started at its full rate, then slowed: SimGrid bounds a transfer by the bandwidth its
        // links had when it started, so a cap raised later would not speed it up again.
        const s4u::CommPtr comm = platform_->start(a, site_index, payload, rate);
        if (f.slowed) platform_->set_rate(a, rate / comm_slowdown_);
        comm->wait();
        for (size_t r : ranks) std::erase(ranks_[r].flying, a);
      } else if (!site.links.empty()) {
        platform_->start(a, site_index, payload, rate)->wait();
      } else {
        s4u::this_actor::sleep_for(payload / rate);  // no link shared with anything else
      }
      ++events_;
    }
    for (size_t r : ranks) set_active(r, -1);
  }

  void check_complete() const {
    std::ostringstream stuck;
    int64_t missing = 0, shown = 0;
    for (const auto& st : streams_) {
      if (st.next >= st.nodes.size()) continue;
      missing += static_cast<int64_t>(st.nodes.size() - st.next);
      if (shown++ >= 6) continue;
      const auto& rg = m_.graph.ranks(static_cast<int>(st.rank));
      const auto& n = rg.nodes(st.nodes[st.next]);
      stuck << (shown > 1 ? "; " : "") << "rank " << rg.rank() << " stream "
            << (st.stream < static_cast<int32_t>(rg.streams_size()) ? rg.streams(st.stream)
                                                                    : std::to_string(st.stream))
            << " waits at '" << n.name() << "'";
    }
    if (missing == 0) return;
    throw base::InputError(
        "", 0, "exec_graph",
        "deadlock: " + std::to_string(missing) + " nodes can never run: " + stuck.str());
  }

  Model& m_;
  const CostModels& costs_;
  Platform* platform_ = nullptr;
  const double comm_slowdown_ = costs_.overlap_comm_slowdown();
  // Compute chains (compute_chain) need compute that nothing else slows or delays.
  bool chains_ = false;
  std::vector<Flight> flights_;  // by actor: the transfer it runs (one at a time)
  std::vector<StreamRun> streams_;
  std::vector<RankState> ranks_;
  std::vector<s4u::SemaphorePtr> wake_;
  std::vector<s4u::ActorPtr> actors_;
  std::unordered_map<std::pair<int64_t, int64_t>, Rendezvous, PairHash> rendezvous_;
  std::unordered_map<int64_t, int64_t> group_size_;  // process group id -> its ranks
  std::unordered_map<int64_t, double> skew_factor_;  // group size -> expected_max_of_normals
  std::vector<std::pair<std::string, std::string>> errors_;
  int64_t events_ = 0;
  double makespan_ = 0;
};

}  // namespace

RunStats run_engine(Model& model, const CostModels& costs, const plan::ResolvedPlan& plan,
                    Router& router, bool chain_compute) {
  int argc = 1;
  char name[] = "orrery-des";
  char* argv[] = {name, nullptr};
  // Never destroyed: this runs in a child process that exits right after (des_engine.cpp), and
  // tearing down an engine whose actors deadlocked is not worth the risk.
  new s4u::Engine(&argc, argv);
  return Runner(model, costs, plan).run(router, chain_compute);
}

}  // namespace orrery::sim::des
