// Perfetto JSON and Chakra ET export of a small hand-made timeline.
#include <filesystem>
#include <fstream>
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
      if (e["name"] == "L0.fwd.mlp.up") {
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
  EXPECT_EQ(flows, 2);  // one arrow: send on rank 0 to recv on rank 1
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

TEST(Chakra, RoundTripsWithChakraAttributes) {
  const fs::path dir = fs::temp_directory_path() / ("orrery_chakra_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const pb::ExecGraph g = two_ranks();
  const auto files = write_chakra(g, dir / "trace", false);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1].filename(), "trace.1.et");
  EXPECT_THROW(write_chakra(g, dir / "trace", false), base::InputError);  // never overwrites
  const ChakraRank r0 = read_chakra(files[0]);
  ASSERT_EQ(r0.nodes.size(), 2u);
  EXPECT_EQ(r0.nodes[0].type(), chakra::COMP_NODE);
  EXPECT_EQ(r0.nodes[0].duration_micros(), 1000u);
  EXPECT_EQ(r0.nodes[1].type(), chakra::COMM_SEND_NODE);
  std::map<std::string, int64_t> attrs;
  for (const auto& a : r0.nodes[1].attr()) {
    if (a.has_int64_val()) attrs[a.name()] = a.int64_val();
  }
  EXPECT_EQ(attrs["comm_src"], 0);
  EXPECT_EQ(attrs["comm_dst"], 1);
  EXPECT_EQ(attrs["comm_tag"], 7);
  EXPECT_EQ(attrs["comm_size"], 1000000);
  ASSERT_EQ(r0.nodes[1].data_deps_size(), 1);
  const ChakraRank r1 = read_chakra(files[1]);
  EXPECT_EQ(r1.nodes[1].type(), chakra::COMM_COLL_NODE);
  bool pg = false;
  for (const auto& a : r1.nodes[1].attr()) {
    if (a.name() == "comm_type") EXPECT_EQ(a.int64_val(), chakra::ALL_REDUCE);
    if (a.name() == "pg_name") pg = a.string_val() == "dp.0";
  }
  EXPECT_TRUE(pg);
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
