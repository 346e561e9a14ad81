// The streaming JSON reader (read_json_file_streaming) against the tree reader (read_spec_file):
// the same message and the same error, byte for byte, for good files and for a corpus of bad ones,
// so streaming a measured trace changes nothing but the memory it takes.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/traces/json_stream.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

namespace fs = std::filesystem;

class JsonStream : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("orrery_json_stream_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // What a reader makes of `text`: the message as JSON, or the error.
  template <class Read>
  std::string outcome(const std::string& text, google::protobuf::Message* msg, Read read) {
    const fs::path file = dir_ / "in.json";
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
    SourceMap where;
    try {
      read(file, msg, &where);
    } catch (const base::InputError& e) {
      return std::string("error: ") + e.what();
    }
    return to_json(*msg) + " line of first field: " + std::to_string(where.line("ranks[0]"));
  }

  void expect_same(const std::string& text, google::protobuf::Message* a,
                   google::protobuf::Message* b) {
    const std::string tree =
        outcome(text, a, [](const fs::path& f, auto* m, SourceMap* w) { read_spec_file(f, m, w); });
    const std::string stream = outcome(text, b, [](const fs::path& f, auto* m, SourceMap* w) {
      read_json_file_streaming(f, m, w);
    });
    EXPECT_EQ(tree, stream) << text;
  }

  void expect_same_trace(const std::string& text) {
    pb::ExecGraph a, b;
    expect_same(text, &a, &b);
  }

  fs::path dir_;
};

constexpr const char* kTrace = R"({
  "model": "m",
  "world_size": 2,
  "steps": 3,
  "step_seconds": [0.5, 0.25, 1e-3],
  "measured_step_s": 0.25,
  "ranks": [
    {"rank": 1, "streams": ["compute", "comm.dp"],
     "nodes": [{"id": 4, "name": "L0.mb0.fwd.attn.qkv", "kind": "compute", "phase": "forward",
                "shape": [4096, 2048], "flops": 12345678901234, "duration_s": 1.5e-4,
                "start_s": 0}]}
  ]
})";

TEST_F(JsonStream, ReadsAGoodTraceAsTheTreeReaderDoes) {
  expect_same_trace(kTrace);
  pb::ExecGraph g;
  read_json_file_streaming(dir_ / "in.json", &g);
  ASSERT_EQ(g.ranks_size(), 1);
  EXPECT_EQ(g.ranks(0).nodes(0).flops(), 12345678901234.0);
  EXPECT_EQ(g.step_seconds(2), 1e-3);
}

TEST_F(JsonStream, RefusesBadFilesWithTheTreeReadersMessage) {
  const std::string t = kTrace;
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = t;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  for (const std::string& bad : {
           replaced("\"steps\": 3", "\"stepz\": 3"),                     // unknown field
           replaced("\"steps\": 3", "\"steps\": 3, \"steps\": 4"),       // twice
           replaced("\"steps\": 3", "\"steps\": null"),                  // null
           replaced("\"steps\": 3", "\"steps\": \"three\""),             // not an integer
           replaced("\"steps\": 3", "\"steps\": 3.5"),                   // not an integer
           replaced("\"steps\": 3", "\"steps\": [3]"),                   // a list
           replaced("\"steps\": 3", "\"steps\": {}"),                    // a mapping
           replaced("\"steps\": 3", "\"steps\": 99999999999999999999"),  // too large
           replaced("\"world_size\": 2", "\"world_size\": 0"),           // positive
           replaced("\"world_size\": 2", "\"world_size\": 3000000000"),  // past int32
           replaced("0.25,", "-0.25,"),                                  // non-negative
           replaced("\"measured_step_s\": 0.25", "\"measured_step_s\": \"1 ms\""),
           replaced("\"measured_step_s\": 0.25", "\"measured_step_s\": 1e999"),
           replaced("\"phase\": \"forward\"", "\"phase\": \"forwrd\""),  // enum near miss
           replaced("\"kind\": \"compute\"", "\"kind\": true"),
           replaced("[4096, 2048]", "[4096, null]"),  // null item
           replaced("[4096, 2048]", "[4096, [1]]"),   // list item
           replaced("\"streams\": [\"compute\", \"comm.dp\"]", "\"streams\": \"compute\""),
           replaced("\"nodes\": [", "\"nodes\": [7, "),  // scalar for a message
           replaced("\"ranks\": [", "\"ranks\": {\"a\": 1}, \"x\": ["),
           replaced("\"model\": \"m\",", "\"model\": \"m\",,"),  // syntax
           t,                                                    // unchanged text
           t + " trailing",
           replaced("\"model\": \"m\"", "\"modl\": \"m\"") + "}",  // field error, then syntax
           std::string("[1, 2]"),
           std::string("null"),
           std::string("3"),
           std::string(""),
           std::string("{}"),
       }) {
    expect_same_trace(bad);
  }
}

// A plan has required fields and required lists: the checks at the end of a mapping or a list.
TEST_F(JsonStream, RequiredFieldsAndListsAsTheTreeReader) {
  for (const std::string& text : {
           std::string(R"({"micro_batch_size": 1})"),
           std::string(R"({"job": {"global_batch_size": 8, "seq_len": 2048},
  "micro_batch_size": 1, "layers_per_stage": []})"),
           std::string(R"({"job": {"global_batch_size": 8, "seq_len": 2048, "precision": "bf16"},
  "micro_batch_size": 1, "bucket_bytes": "40 MiB"})"),
       }) {
    pb::Plan a, b;
    expect_same(text, &a, &b);
  }
}

}  // namespace
}  // namespace orrery
