// Every preset and good input loads, validates, expands and passes check_graph; resizing rules;
// the device database; determinism of the written spec.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"
#include "test_paths.hpp"

namespace orrery::topologies {
namespace {

const std::filesystem::path kInputs = std::filesystem::path(ORRERY_TEST_INPUTS) / "topologies";

TEST(TopologiesPresets, NamesIncludeEveryFileAndLocal) {
  const std::vector<std::string> expected = {"dgx-a100", "dgx-h100", "gb200-nvl72",    "h800",
                                             "local",    "mi300x",   "mixed-a100-h100"};
  EXPECT_EQ(preset_names(), expected);
}

TEST(TopologiesPresets, EveryPresetExpandsToASoundGraph) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const pb::ClusterSpec spec = preset(name);
    const Topology topology(spec);
    EXPECT_EQ(topology.num_devices(), total_devices(spec));
    EXPECT_EQ(topology.num_nodes(), total_nodes(spec));
    EXPECT_EQ(check_graph(topology), std::vector<std::string>{});
  }
}

TEST(TopologiesPresets, DefaultSizes) {
  EXPECT_EQ(total_devices(preset("dgx-h100")), 1024);    // 128 nodes x 8
  EXPECT_EQ(total_devices(preset("dgx-a100")), 1120);    // 140 nodes x 8, Selene-like
  EXPECT_EQ(total_devices(preset("h800")), 2048);        // 256 nodes x 8, DeepSeek-V3
  EXPECT_EQ(total_devices(preset("gb200-nvl72")), 576);  // 8 racks x 18 trays x 4
  EXPECT_EQ(total_devices(preset("mi300x")), 128);       // 16 nodes x 8
  EXPECT_EQ(total_devices(preset("mixed-a100-h100")), 256);
}

TEST(TopologiesPresets, GoodInputsLoadAndExpand) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kInputs / "good")) {
    SCOPED_TRACE(entry.path().string());
    const Topology topology(load_cluster(entry.path().string()));
    EXPECT_EQ(check_graph(topology), std::vector<std::string>{});
    ++files;
  }
  EXPECT_GE(files, 5);
}

TEST(TopologiesPresets, UnknownPresetSuggestsTheNearestName) {
  try {
    preset("dgx-h10");
    FAIL() << "no error";
  } catch (const base::InputError& e) {
    EXPECT_STREQ(e.what(), "cluster: unknown cluster preset 'dgx-h10' (did you mean 'dgx-h100'?)");
  }
}

TEST(TopologiesResize, OneGroupTakesTheNodeCount) {
  const pb::ClusterSpec spec = load_cluster("dgx-h100", 2);
  EXPECT_EQ(total_nodes(spec), 2);
  EXPECT_EQ(total_devices(spec), 16);
}

TEST(TopologiesResize, MixedGroupsScaleTogether) {
  const pb::ClusterSpec spec = load_cluster("mixed-a100-h100", 64);  // 32 nodes x 2
  EXPECT_EQ(spec.node_groups(0).count(), 32);
  EXPECT_EQ(spec.node_groups(1).count(), 32);
}

TEST(TopologiesResize, MixedGroupsRejectABrokenMix) {
  try {
    load_cluster("mixed-a100-h100", 40);
    FAIL() << "no error";
  } catch (const base::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "--nodes: got 40, but cluster 'mixed-a100-h100' mixes 2 node groups in 32 nodes: "
                 "give a multiple of 32 to keep the mix");
  }
}

TEST(TopologiesResize, RejectsNonPositiveCounts) {
  EXPECT_THROW(load_cluster("dgx-h100", 0), base::InputError);
}

TEST(TopologiesResize, NvlinkDomainsMustStayWhole) {
  try {
    load_cluster("gb200-nvl72", 20);
    FAIL() << "no error";
  } catch (const base::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "presets/clusters/gb200-nvl72.yaml:26: node_groups[0].count: 20 nodes do not fill "
                 "whole NVLink domains of 18 nodes (node_types[0].intra.domain_nodes)");
  }
  EXPECT_EQ(total_devices(load_cluster("gb200-nvl72", 18)), 72);  // one rack
}

TEST(TopologiesResize, SixteenThousandGpus) {
  const Topology topology(load_cluster("dgx-h100", 2048));
  EXPECT_EQ(topology.num_devices(), 16384);
}

TEST(TopologiesDeviceDb, HoldsTheDatasheetFigures) {
  EXPECT_EQ(builtin_devices().size(), 11u);
  const pb::ClusterSpec none;
  const pb::DeviceSpec& h100 = find_device(none, "H100-SXM");
  EXPECT_DOUBLE_EQ(peak_flops(h100, "bf16"), 989e12);
  EXPECT_DOUBLE_EQ(h100.memory_bytes(), 81559.0 * 1024 * 1024);  // nvidia-smi's total, not "80 GB"
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth_bytes_per_s(), 3.35e12);
  EXPECT_DOUBLE_EQ(peak_flops(find_device(none, "A100-SXM-80GB"), "bf16"), 312e12);
  EXPECT_DOUBLE_EQ(find_device(none, "A100-SXM-80GB").memory_bandwidth_bytes_per_s(), 2.039e12);
  EXPECT_DOUBLE_EQ(peak_flops(find_device(none, "L40S"), "fp8"), 733e12);
  // 2.3 GHz x 2 FMA units x 16 lanes x 2 FLOP
  EXPECT_DOUBLE_EQ(peak_flops(find_device(none, "x86-64-AVX512-core"), "fp32"), 147.2e9);
  EXPECT_EQ(peak_flops(h100, "fp4"), 0);
  EXPECT_THROW(find_device(none, "H100"), base::InputError);
  EXPECT_THROW(peak_flops(h100, "bf61"), base::InputError);
}

TEST(TopologiesDeviceDb, ClusterDevicesOverrideTheDatabase) {
  pb::ClusterSpec spec;
  pb::DeviceSpec& mine = *spec.add_devices();
  mine.set_name("H100-SXM");
  mine.mutable_peak_flops()->set_bf16(1e15);
  EXPECT_DOUBLE_EQ(peak_flops(find_device(spec, "H100-SXM"), "bf16"), 1e15);
}

TEST(TopologiesDeterminism, WritingAPresetTwiceGivesTheSameBytes) {
  for (const char* name : {"dgx-h100", "gb200-nvl72", "mixed-a100-h100"}) {
    EXPECT_EQ(to_json(preset(name)), to_json(preset(name)));
    EXPECT_EQ(to_yaml(preset(name)), to_yaml(preset(name)));
  }
}

TEST(TopologiesDeterminism, JsonRoundTripsToAnEqualMessage) {
  for (const std::string& name : preset_names()) {
    if (name == "local") continue;  // measured: equal to itself, not to a second discovery
    SCOPED_TRACE(name);
    const pb::ClusterSpec spec = preset(name);
    pb::ClusterSpec back;
    parse_spec(to_json(spec), name + ".json", SpecFormat::kJson, &back);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(spec, back));
  }
}

TEST(TopologiesDot, DrawsTheFirstNodesAndTheFabric) {
  const Topology topology(load_cluster("dgx-h100", 4));
  const std::string dot = to_dot(topology, 1);
  EXPECT_NE(dot.find("n0.gpu7"), std::string::npos);
  EXPECT_EQ(dot.find("n1.gpu0"), std::string::npos);
  EXPECT_NE(dot.find("g0.rail7"), std::string::npos);
  EXPECT_NE(dot.find("450 GB/s"), std::string::npos);
}

}  // namespace
}  // namespace orrery::topologies
