// `orrery simulate --engine des --chakra`: the files meet, rule by rule, what ASTRA-sim's workload
// layer (astra-sim/workload/Workload.cc) and Chakra's feeder read from them, so that ASTRA-sim
// runs them. Each rule below names what ASTRA-sim does with a file that breaks it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orrery/traces/chakra.hpp"
#include "run_command.hpp"
#include "test_paths.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string orrery(const std::string& args) { return std::string(ORRERY_BIN) + " " + args; }

const chakra::AttributeProto* find_attr(const chakra::Node& n, const std::string& name) {
  for (const auto& a : n.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

// The comm-group file: ASTRA-sim std::stoi's each key and reads each value as a list of NPUs.
std::map<int, std::set<int64_t>> read_groups(const fs::path& file, int64_t world) {
  std::map<int, std::set<int64_t>> groups;
  const auto j = nlohmann::json::parse(std::ifstream(file));
  EXPECT_TRUE(j.is_object());
  for (const auto& [key, ranks] : j.items()) {
    size_t used = 0;
    const int id = std::stoi(key, &used);
    EXPECT_EQ(used, key.size()) << key;
    EXPECT_GT(id, 0) << "ASTRA-sim takes group 0 for every rank";
    for (const auto& r : ranks) {
      EXPECT_TRUE(r.is_number_integer());
      EXPECT_GE(r.get<int64_t>(), 0);
      EXPECT_LT(r.get<int64_t>(), world);
      groups[id].insert(r.get<int64_t>());
    }
  }
  return groups;
}

// Every dependency names a node of the file, and the dependencies have no cycle (the feeder
// would wait for ever: "No dependancy free nodes found, there might be deadlocks").
void expect_acyclic_with_known_deps(const ChakraRank& rank, int64_t r) {
  std::map<uint64_t, std::vector<uint64_t>> parents;
  for (const auto& n : rank.nodes) {
    EXPECT_TRUE(parents.emplace(n.id(), std::vector<uint64_t>()).second) << r << " " << n.id();
  }
  for (const auto& n : rank.nodes) {
    for (const auto& deps : {n.data_deps(), n.ctrl_deps()}) {
      for (uint64_t d : deps) {
        EXPECT_TRUE(parents.count(d)) << "rank " << r << " node " << n.id() << " dep " << d;
        parents[n.id()].push_back(d);
      }
    }
  }
  std::map<uint64_t, int> missing;  // Kahn: a node is ready when all its parents are done
  std::map<uint64_t, std::vector<uint64_t>> children;
  for (const auto& [id, ps] : parents) {
    missing[id] = static_cast<int>(ps.size());
    for (uint64_t p : ps) children[p].push_back(id);
  }
  std::vector<uint64_t> ready;
  for (const auto& [id, m] : missing) {
    if (m == 0) ready.push_back(id);
  }
  size_t done = 0;
  while (!ready.empty()) {
    const uint64_t id = ready.back();
    ready.pop_back();
    ++done;
    for (uint64_t c : children[id]) {
      if (--missing[c] == 0) ready.push_back(c);
    }
  }
  EXPECT_EQ(done, rank.nodes.size()) << "rank " << r << ": a dependency cycle";
}

using P2p = std::tuple<int32_t, int32_t, int32_t, int64_t>;  // src, dst, tag, size

struct Seen {
  std::multiset<P2p> sends, recvs;
  std::map<int, std::map<int64_t, std::vector<int64_t>>> coll_sizes;  // group -> rank -> sizes
  int compute = 0, coll = 0, p2p = 0;
};

void check_compute(const chakra::Node& n, int64_t r, Seen& seen) {
  ++seen.compute;
  const auto* ops = find_attr(n, "num_ops");
  const auto* size = find_attr(n, "tensor_size");
  ASSERT_TRUE(ops && size) << r << " " << n.name();
  EXPECT_TRUE(ops->has_int64_val()) << n.name();    // the feeder reads int64_val
  EXPECT_TRUE(size->has_uint64_val()) << n.name();  // ... and uint64_val
  // Replay takes duration_micros; 0 means 1 ns. A des export gives every op its duration.
  EXPECT_TRUE(n.duration_micros() > 0 || ops->int64_val() > 0) << r << " " << n.name();
  EXPECT_GT(n.duration_micros(), 0u) << r << " " << n.name();
}

void check_collective(const chakra::Node& n, int64_t r,
                      const std::map<int, std::set<int64_t>>& groups, Seen& seen) {
  ++seen.coll;
  const auto* type = find_attr(n, "comm_type");
  const auto* size = find_attr(n, "comm_size");
  const auto* pg = find_attr(n, "pg_name");
  ASSERT_TRUE(type && size && pg) << r << " " << n.name();
  ASSERT_TRUE(type->has_int64_val() && size->has_int64_val()) << n.name();
  // What Workload::issue_coll_comm implements; any other type throws there.
  const std::set<int64_t> runs = {chakra::ALL_REDUCE, chakra::ALL_GATHER, chakra::REDUCE_SCATTER,
                                  chakra::ALL_TO_ALL, chakra::BROADCAST};
  EXPECT_TRUE(runs.count(type->int64_val())) << n.name() << " " << type->int64_val();
  EXPECT_GE(size->int64_val(), 0);
  ASSERT_TRUE(pg->has_string_val());
  size_t used = 0;
  const int id = std::stoi(pg->string_val(), &used);  // what extract_comm_group does
  EXPECT_EQ(used, pg->string_val().size()) << pg->string_val();
  ASSERT_TRUE(groups.count(id)) << "rank " << r << " " << n.name() << " group " << id;
  EXPECT_TRUE(groups.at(id).count(r)) << "rank " << r << " not in group " << id;
  seen.coll_sizes[id][r].push_back(size->int64_val());
}

void check_p2p(const chakra::Node& n, int64_t r, Seen& seen) {
  ++seen.p2p;
  const auto* src = find_attr(n, "comm_src");
  const auto* dst = find_attr(n, "comm_dst");
  const auto* tag = find_attr(n, "comm_tag");
  const auto* size = find_attr(n, "comm_size");
  ASSERT_TRUE(src && dst && tag && size) << r << " " << n.name();
  ASSERT_TRUE(src->has_int32_val() && dst->has_int32_val() && tag->has_int32_val()) << n.name();
  ASSERT_TRUE(size->has_int64_val()) << n.name();
  const P2p key{src->int32_val(), dst->int32_val(), tag->int32_val(), size->int64_val()};
  if (n.type() == chakra::COMM_SEND_NODE) {
    EXPECT_EQ(src->int32_val(), r) << "Send node should be issued by the sender";
    seen.sends.insert(key);
  } else {
    EXPECT_EQ(dst->int32_val(), r) << "Recv node should be issued by the receiver";
    seen.recvs.insert(key);
  }
}

void check_node(const chakra::Node& n, int64_t r, const std::map<int, std::set<int64_t>>& groups,
                Seen& seen) {
  const auto* cpu = find_attr(n, "is_cpu_op");
  if (cpu != nullptr) {
    EXPECT_TRUE(cpu->has_bool_val() && !cpu->bool_val());  // a comm node on the CPU throws
  }
  switch (n.type()) {
    case chakra::COMP_NODE:
      return check_compute(n, r, seen);
    case chakra::COMM_COLL_NODE:
      return check_collective(n, r, groups, seen);
    case chakra::COMM_SEND_NODE:
    case chakra::COMM_RECV_NODE:
      return check_p2p(n, r, seen);
    default:
      ADD_FAILURE() << "rank " << r << " node " << n.name() << " has type " << n.type();
  }
}

TEST(ChakraForAstraSim, EveryRuleOfTheWorkloadReaderHolds) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_astra_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "et";
  const auto r = run_command(
      orrery("simulate --model tiny --cluster dgx-a100 --nodes 1 --tp 2 --pp 2 --global-batch 16 "
             "--engine des --chakra " +
             out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t world = 8;
  EXPECT_NE(r.err.find("--workload-configuration=" + chakra_workload_prefix(out).string()),
            std::string::npos)
      << r.err;
  const auto groups = read_groups(chakra_comm_groups_path(out), world);
  EXPECT_FALSE(groups.empty());
  Seen seen;
  for (int64_t rank = 0; rank < world; ++rank) {
    const ChakraRank file =
        read_chakra(chakra_workload_prefix(out).string() + "." + std::to_string(rank) + ".et");
    expect_acyclic_with_known_deps(file, rank);
    for (const auto& n : file.nodes) check_node(n, rank, groups, seen);
  }
  EXPECT_FALSE(fs::exists(chakra_rank_path(out, world)));
  EXPECT_GT(seen.compute, 0);
  EXPECT_GT(seen.coll, 0);
  EXPECT_GT(seen.p2p, 0);
  // Every send has its receive (same src, dst, tag and size): an unmatched one never completes.
  EXPECT_EQ(seen.sends, seen.recvs);
  // Every member of a group issues the same collectives on it, in the same order and sizes.
  for (const auto& [id, by_rank] : seen.coll_sizes) {
    EXPECT_EQ(by_rank.size(), groups.at(id).size()) << "group " << id;
    for (const auto& [rank, sizes] : by_rank) {
      EXPECT_EQ(sizes, by_rank.begin()->second) << "group " << id << " rank " << rank;
    }
  }
  fs::remove_all(dir);
}

TEST(ChakraForAstraSim, TheAnalyticEngineIsRefusedWithTheReason) {
  const auto r = run_command(
      orrery("simulate --model tiny --cluster dgx-a100 --nodes 1 --tp 2 --global-batch 16 "
             "--chakra /tmp/orrery_never_written"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--chakra: Chakra files carry each node's duration"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists("/tmp/orrery_never_written"));
}

}  // namespace
}  // namespace orrery
