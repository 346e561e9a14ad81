#include <filesystem>
#include <fstream>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

using google::protobuf::util::MessageDifferencer;

pb::Plan sample_plan() {
  pb::Plan p;
  p.set_model("llama3-70b");
  p.set_cluster("dgx-h100");
  p.set_nodes(16);
  p.mutable_job()->set_global_batch_size(1024);
  p.mutable_job()->set_seq_len(8192);
  p.mutable_job()->set_precision(pb::PRECISION_BF16);
  p.mutable_parallel()->set_tp(8);
  p.mutable_parallel()->set_pp(4);
  p.mutable_parallel()->set_schedule(pb::PIPELINE_SCHEDULE_ONE_F_ONE_B);
  p.set_micro_batch_size(1);
  p.set_bucket_bytes(0.1);  // not representable in binary: must still round-trip exactly
  p.add_layers_per_stage(19);
  p.add_layers_per_stage(21);
  p.set_placement_order("tp,dp,pp");
  return p;
}

TEST(SpecWriter, JsonIsDeterministicAndOmitsDefaults) {
  pb::Plan p = sample_plan();
  const std::string json = to_json(p);
  EXPECT_EQ(json, to_json(p));
  EXPECT_NE(json.find("\"precision\": \"bf16\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"layers_per_stage\": [19, 21]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"bucket_bytes\": 0.1"), std::string::npos) << json;
  EXPECT_EQ(json.find("sharding"), std::string::npos) << "default enum written";
  EXPECT_EQ(json.find("\"dp\""), std::string::npos) << "absent optional written";
}

TEST(SpecWriter, JsonAndYamlRoundTrip) {
  const pb::Plan p = sample_plan();
  pb::Plan from_json, from_yaml;
  parse_spec(to_json(p), "p.json", SpecFormat::kJson, &from_json);
  parse_spec(to_yaml(p), "p.yaml", SpecFormat::kYaml, &from_yaml);
  EXPECT_TRUE(MessageDifferencer::Equals(p, from_json)) << to_json(from_json);
  EXPECT_TRUE(MessageDifferencer::Equals(p, from_yaml)) << to_yaml(from_yaml);
}

TEST(SpecWriter, StringsAreEscaped) {
  pb::ExecNode n;
  n.set_name("say \"hi\"\n\tto: {yaml}");
  n.set_kind(pb::NODE_KIND_COMPUTE);
  pb::ExecNode back;
  parse_spec(to_json(n), "n.json", SpecFormat::kJson, &back);
  EXPECT_EQ(back.name(), n.name());
  parse_spec(to_yaml(n), "n.yaml", SpecFormat::kYaml, &back);
  EXPECT_EQ(back.name(), n.name());
}

TEST(SpecWriter, AtomicWriteNeverOverwritesUnlessAsked) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("orrery_writer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "out.yaml";
  write_file_atomically(file, "a: 1\n", false);
  EXPECT_THROW(write_file_atomically(file, "a: 2\n", false), base::InputError);
  std::ifstream in(file);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "a: 1\n");
  write_file_atomically(file, "a: 3\n", true);
  std::ifstream again(file);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), {}), "a: 3\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1)
      << "temporary file left behind";
  EXPECT_THROW(write_file_atomically(dir / "missing" / "x.yaml", "", false), base::InputError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace orrery
