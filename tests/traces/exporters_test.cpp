// Perfetto JSON and Chakra ET export of a small hand-made timeline.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/traces/chakra.hpp"
#include "orrery/traces/perfetto.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;

// Two ranks: rank 0 computes then sends to rank 1, which receives and all-reduces with it.
pb::ExecGraph two_ranks() {
  pb::ExecGraph g;
  g.set_world_size(2);
  g.set_producer("test");
  auto* pg = g.add_process_groups();
  pg->set_id(0);
  pg->set_dim("dp");
  pg->add_ranks(0);
  pg->add_ranks(1);
  for (int r = 0; r < 2; ++r) {
    auto* rank = g.add_ranks();
    rank->set_rank(r);
    rank->set_device(r);
    rank->add_streams("compute");
    rank->add_streams("p2p");
    auto* a = rank->add_nodes();
    a->set_id(0);
    a->set_kind(r == 0 ? pb::NODE_KIND_COMPUTE : pb::NODE_KIND_RECV);
    a->set_name(r == 0 ? "L0.fwd.mlp.up" : "recv.act");
    a->set_stream(r == 0 ? 0 : 1);
    a->set_op_class(pb::OP_CLASS_GEMM);
    a->set_flops(r == 0 ? 2e12 : 0);
    a->set_peer(r == 0 ? 0 : 0);
    a->set_tag(7);
    a->set_comm_bytes(r == 0 ? 0 : 1e6);
    a->set_start_s(r == 0 ? 0 : 1e-3);
    a->set_duration_s(r == 0 ? 1e-3 : 2e-4);
    auto* b = rank->add_nodes();
    b->set_id(1);
    b->set_kind(r == 0 ? pb::NODE_KIND_SEND : pb::NODE_KIND_COLLECTIVE);
    b->set_name(r == 0 ? "send.act" : "dp.bucket0.all_reduce");
    b->set_stream(r == 0 ? 1 : 0);
    b->add_data_deps(0);
    if (r == 0) {
      b->set_peer(1);
      b->set_tag(7);
      b->set_comm_bytes(1e6);
    } else {
      b->set_collective(pb::COLLECTIVE_KIND_ALL_REDUCE);
      b->set_process_group(0);
      b->set_comm_bytes(4e6);
    }
    b->set_start_s(r == 0 ? 1e-3 : 1.2e-3);
    b->set_duration_s(r == 0 ? 2e-4 : 5e-4);
  }
  return g;
}

TEST(Perfetto, TracksEventsAndArrows) {
  const pb::ExecGraph g = two_ranks();
  const std::string text = to_perfetto_json({{&g, "predicted"}});
  EXPECT_EQ(text, to_perfetto_json({{&g, "predicted"}}));  // deterministic
  const auto j = nlohmann::json::parse(text);
  int complete = 0, names = 0, flows = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      if (e["name"] == "fwd.mlp.up") {  // "L0." goes to args
        EXPECT_EQ(e["args"]["layer"], 0);
        EXPECT_EQ(e["args"]["node"], "L0.fwd.mlp.up");
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1000.0);  // 1 ms in microseconds
        EXPECT_EQ(e["cat"], "gemm");
      }
    }
    if (e["ph"] == "M" && e["name"] == "process_name") {
      ++names;
      EXPECT_EQ(e["args"]["name"].get<std::string>().rfind("predicted rank ", 0), 0u);
    }
    if (e["ph"] == "s" || e["ph"] == "f") ++flows;
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(names, 2);
  // Three arrows: send on rank 0 to recv on rank 1, and on each rank the dependency that crosses
  // from one stream's track to the other's.
  EXPECT_EQ(flows, 6);
}

TEST(Perfetto, OpNamesLeaveTheirIndicesToArgs) {
  std::vector<std::pair<std::string, long long>> idx;
  EXPECT_EQ(perfetto_op_name("L12.mb3.fwd.attn.qkv", &idx), "fwd.attn.qkv");
  EXPECT_EQ(idx,
            (std::vector<std::pair<std::string, long long>>{{"layer", 12}, {"micro_batch", 3}}));
  idx.clear();
  EXPECT_EQ(perfetto_op_name("opt.dp.bucket7.all_reduce", &idx), "opt.dp.all_reduce");
  EXPECT_EQ(idx, (std::vector<std::pair<std::string, long long>>{{"bucket", 7}}));
  idx.clear();
  // Words that merely start like an index stay: "Lm", "mbx", a bare "L".
  EXPECT_EQ(perfetto_op_name("Lm.mbx.L.head", &idx), "Lm.mbx.L.head");
  EXPECT_TRUE(idx.empty());
}

// One rank, one "comm" stream with three collectives: two overlap without nesting (as concurrent
// collectives on one stream do), the third follows the first back to back at a time whose
// microseconds do not round evenly.
pb::ExecGraph concurrent_collectives() {
  pb::ExecGraph g;
  g.set_world_size(1);
  auto* rank = g.add_ranks();
  rank->add_streams("comm");
  const double times[3][2] = {{0, 1.0000004e-3}, {0.5e-3, 1e-3}, {1.0000004e-3, 0.3333333e-3}};
  for (int i = 0; i < 3; ++i) {
    auto* n = rank->add_nodes();
    n->set_id(i);
    n->set_kind(pb::NODE_KIND_COLLECTIVE);
    n->set_name("mb" + std::to_string(i) + ".fwd.all_gather");
    n->set_collective(pb::COLLECTIVE_KIND_ALL_GATHER);
    n->set_start_s(times[i][0]);
    n->set_duration_s(times[i][1]);
  }
  return g;
}

TEST(Perfetto, OverlappingSlicesOfAStreamGetTracksOfTheirOwnAndNeverOverlap) {
  const pb::ExecGraph g = concurrent_collectives();
  const auto j = nlohmann::json::parse(to_perfetto_json({{&g, ""}}));
  std::map<int, std::vector<std::pair<double, double>>> by_tid;
  std::map<int, std::string> names;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      // Whole nanoseconds: three decimals at most in microseconds.
      EXPECT_DOUBLE_EQ(std::round(ts * 1000) / 1000, ts);
      EXPECT_DOUBLE_EQ(std::round(dur * 1000) / 1000, dur);
      by_tid[e["tid"].get<int>()].push_back({ts, ts + dur});
      EXPECT_EQ(e["name"], "fwd.all_gather");
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
  }
  ASSERT_EQ(by_tid.size(), 2U);  // the second collective overlaps the first: a track of its own
  EXPECT_EQ(names.at(0), "comm");
  EXPECT_EQ(names.at(1), "comm (2)");
  const auto& first = by_tid.at(0);
  ASSERT_EQ(first.size(), 2U);
  // Back to back: the third starts exactly where the first ends, after rounding.
  EXPECT_DOUBLE_EQ(first[0].second, first[1].first);
  EXPECT_DOUBLE_EQ(first[0].second, 1000.0);  // 1.0000004 ms -> 1,000,000 ns
}

TEST(Perfetto, SideBySideSourcesDoNotShareProcesses) {
  const pb::ExecGraph g = two_ranks();
  const auto j = nlohmann::json::parse(to_perfetto_json({{&g, "predicted"}, {&g, "measured"}}));
  std::set<int> pids;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
}

TEST(Chakra, RoundTripsWithTheReferenceAttributeTypes) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_chakra_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const pb::ExecGraph g = two_ranks();
  const auto files = write_chakra(g, dir / "trace", false);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[1], dir / "trace" / "trace.1.et");
  EXPECT_EQ(files[1], chakra_rank_path(dir / "trace", 1));
  EXPECT_EQ(files[2], chakra_comm_groups_path(dir / "trace"));
  EXPECT_EQ(files[2].filename(), "comm_groups.json");
  EXPECT_THROW(write_chakra(g, dir / "trace", false), base::InputError);  // never overwrites
  // orrery's group 0 is ASTRA-sim's group 1: ASTRA-sim reads "0" as every rank.
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(files[2])),
            nlohmann::json::parse(R"({"1":[0,1]})"));
  const ChakraRank r0 = read_chakra(files[0]);
  ASSERT_EQ(r0.nodes.size(), 2u);
  EXPECT_EQ(r0.nodes[0].type(), chakra::COMP_NODE);
  EXPECT_EQ(r0.nodes[0].duration_micros(), 1000u);
  std::map<std::string, chakra::AttributeProto> a0, a1;
  for (const auto& a : r0.nodes[0].attr()) a0[a.name()] = a;
  EXPECT_EQ(a0["num_ops"].int64_val(), 2000000000000);
  EXPECT_TRUE(a0["tensor_size"].has_uint64_val());
  EXPECT_EQ(r0.nodes[1].type(), chakra::COMM_SEND_NODE);
  for (const auto& a : r0.nodes[1].attr()) a1[a.name()] = a;
  EXPECT_EQ(a1["comm_src"].int32_val(), 0);
  EXPECT_EQ(a1["comm_dst"].int32_val(), 1);
  EXPECT_EQ(a1["comm_tag"].int32_val(), 7);
  EXPECT_EQ(a1["comm_size"].int64_val(), 1000000);
  EXPECT_TRUE(a1["is_cpu_op"].has_bool_val());
  ASSERT_EQ(r0.nodes[1].data_deps_size(), 1);
  const ChakraRank r1 = read_chakra(files[1]);
  EXPECT_EQ(r1.nodes[1].type(), chakra::COMM_COLL_NODE);
  std::map<std::string, chakra::AttributeProto> c;
  for (const auto& a : r1.nodes[1].attr()) c[a.name()] = a;
  EXPECT_EQ(c["comm_type"].int64_val(), chakra::ALL_REDUCE);
  EXPECT_EQ(c["comm_size"].int64_val(), 4000000);
  EXPECT_EQ(c["pg_name"].string_val(), "1");
  fs::remove_all(dir);
}

// Each graph ASTRA-sim could not run is refused before any file is written, naming the node.
TEST(Chakra, RefusesWhatAstraSimCannotRunNamingTheNode) {
  const fs::path dir =
      fs::temp_directory_path() / ("orrery_chakra_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto refused = [&](const pb::ExecGraph& g, const std::string& reason) {
    try {
      write_chakra(g, dir / "trace", false);
      ADD_FAILURE() << "accepted; expected: " << reason;
    } catch (const base::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_empty(dir));
  };
  pb::ExecGraph g = two_ranks();
  g.mutable_ranks(1)->mutable_nodes(1)->set_collective(pb::COLLECTIVE_KIND_REDUCE);
  refused(g, "rank 1, node 1 'dp.bucket0.all_reduce': collective 'reduce' has no ASTRA-sim");
  g.mutable_ranks(1)->mutable_nodes(1)->set_collective(pb::COLLECTIVE_KIND_BARRIER);
  refused(g, "collective 'barrier' has no ASTRA-sim implementation");
  g = two_ranks();
  g.mutable_ranks(0)->mutable_nodes(0)->clear_duration_s();
  refused(g, "rank 0, node 0 'L0.fwd.mlp.up': has no duration_s");
  g = two_ranks();
  g.mutable_ranks(0)->clear_streams();  // a rank without streams: no out_of_range, a reason
  refused(g, "rank 0, node 0 'L0.fwd.mlp.up': its stream 0 is not one of the rank's 0 streams");
  g = two_ranks();
  g.mutable_process_groups(0)->clear_ranks();
  g.mutable_process_groups(0)->add_ranks(0);
  refused(g, "rank 1, node 1 'dp.bucket0.all_reduce': its process group 0 does not hold the rank");
  g = two_ranks();
  g.mutable_ranks(1)->mutable_nodes(1)->set_process_group(5);
  refused(g, "its process group 5 is not in the graph");
  g = two_ranks();
  g.mutable_ranks()->RemoveLast();
  refused(g, "the graph holds 1 of its 2 ranks");
  fs::remove_all(dir);
}

TEST(Chakra, RejectsAFileThatIsNotATrace) {
  const fs::path f =
      fs::temp_directory_path() / ("orrery_not_chakra_" + std::to_string(::getpid()));
  {
    std::ofstream out(f, std::ios::binary);
    out << "\x05garbage-that-is-not-protobuf";
  }
  EXPECT_THROW(read_chakra(f), base::InputError);
  fs::remove(f);
}

}  // namespace
}  // namespace orrery
