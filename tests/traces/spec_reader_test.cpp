// The generic reader on the real formats: every check it makes, with the exact message.
#include <gtest/gtest.h>

#include "orrery/base/error.hpp"
#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/model.pb.h"
#include "orrery/pb/plan.pb.h"
#include "orrery/traces/field_ranges.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery {
namespace {

std::string error_of(std::string_view text, google::protobuf::Message* msg,
                     SpecFormat format = SpecFormat::kYaml) {
  try {
    parse_spec(text, "in.yaml", format, msg);
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "no error";
}

constexpr std::string_view kJob = R"(job:
  global_batch_size: 512
  seq_len: 2048
  precision: bf16
parallel:
  tp: 8
  pp: 2
  sequence_parallel: true
  schedule: interleaved_1f1b
micro_batch_size: 1
sharding: zero1
bucket_bytes: 40 MiB
layers_per_stage: [20, 20]
)";

TEST(SpecReader, ReadsAPlanWithUnitsEnumsAndLists) {
  pb::Plan plan;
  SourceMap where;
  parse_spec(kJob, "plan.yaml", SpecFormat::kYaml, &plan, &where);
  EXPECT_EQ(plan.job().global_batch_size(), 512);
  EXPECT_EQ(plan.job().precision(), pb::PRECISION_BF16);
  EXPECT_EQ(plan.parallel().tp(), 8);
  EXPECT_TRUE(plan.parallel().has_pp());
  EXPECT_FALSE(plan.parallel().has_dp());  // absent stays absent: no silent default
  EXPECT_EQ(plan.parallel().schedule(), pb::PIPELINE_SCHEDULE_INTERLEAVED_1F1B);
  EXPECT_EQ(plan.sharding(), pb::SHARDING_ZERO1);
  EXPECT_DOUBLE_EQ(plan.bucket_bytes(), 40.0 * 1024 * 1024);
  ASSERT_EQ(plan.layers_per_stage_size(), 2);
  // Lines are 1-based and point at the key.
  EXPECT_EQ(where.line("parallel.tp"), 6);
  EXPECT_EQ(where.line("layers_per_stage[1]"), 13);
  EXPECT_EQ(where.line("parallel.tp.nonexistent"), 6);  // nearest recorded ancestor
}

TEST(SpecReader, UnknownFieldSuggestsTheNearMiss) {
  pb::Plan plan;
  EXPECT_EQ(error_of("job: {global_batch_size: 8, seq_len: 64, precision: bf16}\n"
                     "parallel: {tp: 2, sequence_paralel: true}\nmicro_batch_size: 1\n",
                     &plan),
            "in.yaml:2: parallel.sequence_paralel: unknown field (did you mean "
            "'sequence_parallel'?)");
}

TEST(SpecReader, EnumValueSuggestsTheNearMiss) {
  pb::Plan plan;
  EXPECT_EQ(error_of("job: {global_batch_size: 8, seq_len: 64, precision: bf61}\n"
                     "parallel: {}\nmicro_batch_size: 1\n",
                     &plan),
            "in.yaml:1: job.precision: got 'bf61' (did you mean 'bf16'?)");
}

TEST(SpecReader, MissingRequiredFieldIsNamed) {
  pb::Plan plan;
  EXPECT_EQ(error_of("job: {global_batch_size: 8, precision: bf16}\nparallel: {}\n"
                     "micro_batch_size: 1\n",
                     &plan),
            "in.yaml:1: job.seq_len: required field is missing (an integer)");
}

TEST(SpecReader, TypeSignAndShapeErrors) {
  pb::ModelSpec m;
  EXPECT_EQ(error_of("name: x\nnum_layers: 2.5\n", &m),
            "in.yaml:2: num_layers: got '2.5', expected an integer");
  EXPECT_EQ(error_of("name: x\nnum_layers: -4\n", &m),
            "in.yaml:2: num_layers: got -4, expected a value > 0");
  EXPECT_EQ(error_of("name: x\ntied_embeddings: yes\n", &m),
            "in.yaml:2: tied_embeddings: got 'yes', expected true or false");
  EXPECT_EQ(error_of("name: [a, b]\n", &m), "in.yaml:1: name: got a list, expected a single value");
  EXPECT_EQ(error_of("name: x\nnum_layers: 2\nnum_layers: 3\n", &m),
            "in.yaml:3: num_layers: appears twice");
  EXPECT_EQ(error_of("- a\n- b\n", &m),
            "in.yaml:1: got a list, expected a mapping of ModelSpec fields");
  EXPECT_EQ(error_of("", &m), "in.yaml: the file is empty");
  EXPECT_EQ(error_of("name: x\nnum_layers: [\n", &m).rfind("in.yaml:3: not valid YAML:", 0), 0u);
}

TEST(SpecReader, UnitErrorsNameTheField) {
  pb::LinkSpec link;
  EXPECT_EQ(error_of("bandwidth_bytes_per_s: 400 Gbit/s\n", &link),
            "in.yaml:1: bandwidth_bytes_per_s: unknown unit 'Gbit/s' in '400 Gbit/s', expected "
            "one of: B/s, kB/s, KB/s, MB/s, GB/s, TB/s, GiB/s, b/s, bps, Kb/s, Mb/s, Gb/s, Gbps, "
            "Tb/s");
  EXPECT_EQ(error_of("bandwidth_bytes_per_s: 0 GB/s\n", &link),
            "in.yaml:1: bandwidth_bytes_per_s: got 0 GB/s, expected a value > 0");
}

TEST(SpecReader, JsonIsCheckedStrictlyWithLines) {
  pb::LinkSpec link;
  // YAML would take the unquoted key; JSON must not.
  std::string err = error_of("{\n  \"latency_s\": 1e-6,\n  bandwidth_bytes_per_s: 5\n}\n", &link,
                             SpecFormat::kJson);
  EXPECT_EQ(err.rfind("in.yaml:3: not valid JSON: syntax error", 0), 0u) << err;
  parse_spec("{\"bandwidth_bytes_per_s\": 5e10, \"latency_s\": \"2 us\"}", "in.json",
             SpecFormat::kJson, &link);
  EXPECT_DOUBLE_EQ(link.bandwidth_bytes_per_s(), 5e10);
  EXPECT_DOUBLE_EQ(link.latency_s(), 2e-6);
}

TEST(SpecReader, ParseClearsThePreviousContent) {
  pb::LinkSpec link;
  parse_spec("bandwidth_bytes_per_s: 5e9\nlatency_s: 1e-6\n", "a", SpecFormat::kYaml, &link);
  parse_spec("bandwidth_bytes_per_s: 7e9\n", "b", SpecFormat::kYaml, &link);
  EXPECT_DOUBLE_EQ(link.latency_s(), 0);
}

// The message a LinkSpec in YAML gets, or "" when it is read.
std::string link_error(const std::string& yaml) {
  pb::LinkSpec link;
  try {
    parse_spec(yaml, "l.yaml", SpecFormat::kYaml, &link);
  } catch (const base::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SpecReader, NumbersMustBeFiniteAndWithinTheirRange) {
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: nan\n"),
            "l.yaml:1: bandwidth_bytes_per_s: got 'nan', expected a finite number");
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: 1e308 TB/s\n"),
            "l.yaml:1: bandwidth_bytes_per_s: got '1e308 TB/s', expected a finite number");
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: 0.5 B/s\n"),
            "l.yaml:1: bandwidth_bytes_per_s: got 0.5 B/s, expected at least 1 MB/s (10 Mb "
            "Ethernet is faster; 1 PB/s is 500x NVLink 5)");
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: 1 GB/s\nlatency_s: 1.3 s\n"),
            "l.yaml:2: latency_s: got 1.3 s, expected at most 100 ms (a round trip across a "
            "continent; cluster links take microseconds)");
  // Both ends are included: the widest real values are read.
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: 1000 TB/s\nlatency_s: 100 ms\n"), "");
}

TEST(SpecReader, ASecondYamlDocumentIsRefused) {
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: 1 GB/s\n---\nbandwidth_bytes_per_s: 2 GB/s\n"),
            "l.yaml:3: holds 2 YAML documents (separated by '---'); a file holds one");
}

// Found by plan_spec_fuzz and cluster_spec_fuzz (tests/fuzz/): a ',' outside [] or {} made
// yaml-cpp's LoadAll yield empty documents forever, allocating as it went; every YAML reader hung.
TEST(SpecReader, AStrayCommaIsRefusedNotLoopedOn) {
  EXPECT_EQ(link_error(","),
            "l.yaml:1: not valid YAML: the parser cannot read on from here (a ',' outside [] or "
            "{}?)");
  EXPECT_EQ(link_error("bandwidth_bytes_per_s: 1 GB/s\n---\n,\n"),
            "l.yaml:3: not valid YAML: the parser cannot read on from here (a ',' outside [] or "
            "{}?)");
  // Documents that each move the parser on are counted, however many there are.
  EXPECT_EQ(link_error("a: 1\n---\nb: 2\n---\nc: 3\n"),
            "l.yaml:3: holds 3 YAML documents (separated by '---'); a file holds one");
}

// A spec made in code gets the ranges a file would: the first field out of its range, by path.
TEST(SpecReader, CheckFieldValuesWalksNestedMessages) {
  pb::ClusterSpec c;
  c.add_node_types()->mutable_intra()->mutable_pcie_link()->set_bandwidth_bytes_per_s(64e9);
  c.add_node_groups()->set_count(4);
  EXPECT_NO_THROW(check_field_values(c, SourceMap("c.yaml")));
  c.mutable_node_types(0)->mutable_intra()->mutable_pcie_link()->set_latency_s(1e308);
  try {
    check_field_values(c, SourceMap("c.yaml"));
    FAIL() << "1e308 s accepted";
  } catch (const base::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "c.yaml: node_types[0].intra.pcie_link.latency_s: got 1e+308, expected at most 100 "
              "ms (a round trip across a continent; cluster links take microseconds)");
  }
}

TEST(SpecReader, MissingFileIsAnInputError) {
  pb::LinkSpec link;
  try {
    read_spec_file("/nonexistent/cluster.yaml", &link);
    FAIL();
  } catch (const base::InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/cluster.yaml: no such file");
  }
}

}  // namespace
}  // namespace orrery
