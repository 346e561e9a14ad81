// Spreading the search over ranks: N in-process "ranks" (threads exchanging bytes through a
// std::barrier) must reach the same ranking, bytes for bytes, as one process. This exercises the
// split (candidate i on rank i % N), the serialization and the all-gather without MPI; the
// mpirun test (mpi_test.cpp) checks the real thing end to end.
#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "orrery/models/model_catalog.hpp"
#include "orrery/planner/ranks.hpp"
#include "orrery/planner/search.hpp"
#include "orrery/sim/engine.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::planner {
namespace {

// The shared mailbox of `size` in-process ranks.
class Exchange {
 public:
  explicit Exchange(int size) : slots_(static_cast<size_t>(size)), barrier_(size) {}
  std::vector<std::string> allgather(int rank, const std::string& mine) {
    slots_[static_cast<size_t>(rank)] = mine;
    barrier_.arrive_and_wait();  // every slot written
    std::vector<std::string> all = slots_;
    barrier_.arrive_and_wait();  // every copy taken before the next round writes
    return all;
  }
  int size() const { return static_cast<int>(slots_.size()); }

 private:
  std::vector<std::string> slots_;
  std::barrier<> barrier_;
};

class ThreadRanks : public Ranks {
 public:
  ThreadRanks(Exchange& exchange, int rank) : exchange_(exchange), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return exchange_.size(); }
  std::vector<std::string> allgather(const std::string& mine) const override {
    return exchange_.allgather(rank_, mine);
  }

 private:
  Exchange& exchange_;
  int rank_;
};

struct Fixture {
  Fixture(const std::string& model, int64_t nodes, int64_t gbs, int64_t seq, SpaceOptions options)
      : job(make_job(model, nodes, gbs, seq)),
        topology(job.cluster),
        costs(topology, "bf16"),
        engine(costs),
        space(job, std::move(options)) {}
  static PlanningJob make_job(const std::string& model, int64_t nodes, int64_t gbs, int64_t seq) {
    PlanningJob j;
    j.model = models::load_model(model);
    j.cluster = topologies::load_cluster("dgx-h100", nodes);
    j.base.set_model(model);
    j.base.set_cluster("dgx-h100");
    j.base.set_nodes(nodes);
    j.base.mutable_job()->set_global_batch_size(gbs);
    j.base.mutable_job()->set_seq_len(seq);
    j.base.mutable_job()->set_precision(pb::PRECISION_BF16);
    return j;
  }
  PlanningJob job;
  topologies::Topology topology;
  sim::CostModels costs;
  AnalyticEngine engine;
  PlanSpace space;
};

std::string result_bytes(const SearchResult& r) {
  std::string s;
  for (const auto& p : r.ranked)
    s += knob_key(p.knobs) + "\n" + to_json(p.plan) + to_json(p.eval.result);
  const auto& t = r.stats;
  s += std::to_string(t.checked) + " " + std::to_string(t.invalid) + " " +
       std::to_string(t.out_of_memory) + " " + std::to_string(t.timed) + " " +
       std::to_string(t.local_rounds) + " " + r.closest_oom_plan + "\n";
  for (const auto& [rule, count] : r.rules_hit) s += rule + " " + std::to_string(count) + "\n";
  return s;
}

// Runs the search on `size` in-process ranks; returns each rank's result bytes.
std::vector<std::string> spread_search(const Fixture& f, SearchOptions options, int size) {
  Exchange exchange(size);
  std::vector<std::string> out(static_cast<size_t>(size));
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      const ThreadRanks mine(exchange, r);
      SearchOptions o = options;
      o.ranks = &mine;
      out[static_cast<size_t>(r)] = result_bytes(search(f.space, f.engine, o));
    });
  }
  for (auto& t : ranks) t.join();
  return out;
}

TEST(Spread, PlainProcessHasNoMpiWorld) {
  // ctest does not run this under mpirun: the planner must not touch MPI.
  if (started_by_mpirun()) GTEST_SKIP() << "running under mpirun";
  EXPECT_EQ(mpi_world(), nullptr);
}

TEST(Spread, LocalSearchOverThreeRanksEqualsOneProcess) {
  SpaceOptions space;
  space.max_micro_batch = 4;
  const Fixture f("llama3-70b", 8, 256, 4096, space);
  SearchOptions o;
  o.exhaustive_limit = 0;  // screen + local search: many batches of uneven sizes
  o.top_k = 10;
  const std::string single = result_bytes(search(f.space, f.engine, o));
  for (const auto& rank_bytes : spread_search(f, o, 3)) EXPECT_EQ(rank_bytes, single);
}

TEST(Spread, ExhaustiveOverTwoRanksEqualsOneProcess) {
  SpaceOptions space;
  space.placements = {""};
  space.bucket_bytes = {0};
  space.max_micro_batch = 4;
  const Fixture f("llama3-8b", 2, 64, 4096, space);
  SearchOptions o;
  o.force_exhaustive = true;
  o.threads = 2;
  const std::string single = result_bytes(search(f.space, f.engine, o));
  for (const auto& rank_bytes : spread_search(f, o, 2)) EXPECT_EQ(rank_bytes, single);
}

TEST(Spread, MoreRanksThanCandidates) {
  SpaceOptions space;
  space.tp = {8};
  space.pp = {1};
  space.cp = {1};
  space.placements = {""};
  space.bucket_bytes = {0};
  space.micro_batch = {1};
  space.sharding = {pb::SHARDING_ZERO1};
  space.recompute = {pb::RECOMPUTE_SELECTIVE};
  const Fixture f("llama3-8b", 2, 64, 4096, space);
  SearchOptions o;
  const std::string single = result_bytes(search(f.space, f.engine, o));
  ASSERT_NE(single.find("tp8"), std::string::npos);
  for (const auto& rank_bytes : spread_search(f, o, 5)) EXPECT_EQ(rank_bytes, single);
}

}  // namespace
}  // namespace orrery::planner
