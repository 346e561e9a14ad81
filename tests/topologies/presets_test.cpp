// Every preset and good input loads, validates, expands and passes check_graph; resizing rules;
// the device database; determinism of the written spec.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/topology.hpp"
#include "orrery/topologies/transport.hpp"
#include "test_paths.hpp"

namespace orrery::topologies {
namespace {

const std::filesystem::path kInputs = std::filesystem::path(ORRERY_TEST_INPUTS) / "topologies";

TEST(TopologiesPresets, NamesIncludeEveryFileAndLocal) {
  const std::vector<std::string> expected = {
      "aws-p4d",     "aws-p4de",         "aws-p5",           "aws-p5e",
      "aws-p6",      "azure-nd-h100-v5", "azure-nd-h200-v5", "azure-nd-mi300x-v5",
      "dgx-a100",    "dgx-h100",         "gb200-nvl72",      "gb300-nvl72",
      "gcp-a3-high", "gcp-a3-mega",      "gcp-a4",           "h800",
      "hgx-a800",    "hgx-b200",         "hgx-h200",         "ib-ndr-h100",
      "local",       "mi300x",           "mi325x",           "mixed-a100-h100"};
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
  EXPECT_EQ(total_devices(preset("hgx-a800")), 1120);    // the same fabric as dgx-a100
  EXPECT_EQ(total_devices(preset("h800")), 2048);        // 256 nodes x 8, DeepSeek-V3
  EXPECT_EQ(total_devices(preset("gb200-nvl72")), 576);  // 8 racks x 18 trays x 4
  EXPECT_EQ(total_devices(preset("mi300x")), 128);       // 16 nodes x 8
  EXPECT_EQ(total_devices(preset("mixed-a100-h100")), 256);
  EXPECT_EQ(total_devices(preset("gb300-nvl72")), 576);  // 8 racks x 18 trays x 4
  EXPECT_EQ(total_devices(preset("hgx-h200")), 256);     // one 32-node scalable unit
  EXPECT_EQ(total_devices(preset("hgx-b200")), 256);
  EXPECT_EQ(total_devices(preset("ib-ndr-h100")), 512);  // 64 nodes x 8
  for (const char* cloud :
       {"aws-p4d", "aws-p4de", "aws-p5", "aws-p5e", "aws-p6", "gcp-a3-high", "gcp-a3-mega",
        "gcp-a4", "azure-nd-h100-v5", "azure-nd-h200-v5", "azure-nd-mi300x-v5", "mi325x"}) {
    EXPECT_EQ(total_devices(preset(cloud)), 128) << cloud;  // 16 instances x 8
  }
}

// What each new preset's header cites, read back: the device, the per-GPU NVLink or Infinity
// Fabric rate per direction, the NICs and their port rate, the transport, and the network devices
// NCCL sees (transport.hpp).
struct PresetFigures {
  const char* preset;
  const char* device;
  double device_link_bytes_per_s;  // per direction
  int64_t nics;
  double nic_bits_per_s;
  pb::TransportKind transport;
  int64_t net_devices;  // per node
  double net_device_bytes_per_s;
};

TEST(TopologiesPresets, CloudAndRackPresetsHoldTheirSourcesFigures) {
  constexpr double kGb = 1e9 / 8;  // bytes/s of 1 Gb/s
  const PresetFigures figures[] = {
      // HGX H200 / B200: NVLink 900 GB/s and 1.8 TB/s bidirectional; 8 x 400 Gb/s NDR.
      {"hgx-h200", "H200-SXM", 450e9, 8, 400e9, pb::TRANSPORT_KIND_INFINIBAND, 8, 400 * kGb},
      {"hgx-b200", "B200", 900e9, 8, 400e9, pb::TRANSPORT_KIND_INFINIBAND, 8, 400 * kGb},
      // GB300 NVL72: 130 TB/s NVLink / 72 GPUs / 2 directions; a ConnectX-8 at 800 Gb/s per GPU.
      {"gb300-nvl72", "GB300", 900e9, 4, 800e9, pb::TRANSPORT_KIND_INFINIBAND, 4, 800 * kGb},
      // MI325X: 7 Infinity Fabric links of 128 GB/s bidirectional; 400 Gb/s RoCE per GPU.
      {"mi325x", "MI325X", 64e9, 8, 400e9, pb::TRANSPORT_KIND_ROCE, 8, 400 * kGb},
      // p4d/p4de: 400 Gbps EFA = 4 network cards x 100 Gbps, two GPUs per NIC.
      {"aws-p4d", "A100-SXM-40GB", 300e9, 4, 100e9, pb::TRANSPORT_KIND_EFA, 4, 100 * kGb},
      {"aws-p4de", "A100-SXM-80GB", 300e9, 4, 100e9, pb::TRANSPORT_KIND_EFA, 4, 100 * kGb},
      // p5/p5e: 3,200 Gbps = 32 x 100 Gbps, four striped per GPU: 8 devices of 400 Gb/s.
      {"aws-p5", "H100-SXM", 450e9, 32, 100e9, pb::TRANSPORT_KIND_EFA, 8, 400 * kGb},
      {"aws-p5e", "H200-SXM", 450e9, 32, 100e9, pb::TRANSPORT_KIND_EFA, 8, 400 * kGb},
      // p6-b200: 3.2 Tbps EFA = 8 x 400 Gbps.
      {"aws-p6", "B200", 900e9, 8, 400e9, pb::TRANSPORT_KIND_EFA, 8, 400 * kGb},
      // A3 High: 4 x 200 Gbps GPU NICs (TCPX); A3 Mega: 8 x 200 (TCPXO); A4: 8 x 400 RoCE.
      {"gcp-a3-high", "H100-SXM", 450e9, 4, 200e9, pb::TRANSPORT_KIND_GPUDIRECT_TCPX, 4, 200 * kGb},
      {"gcp-a3-mega", "H100-SXM", 450e9, 8, 200e9, pb::TRANSPORT_KIND_GPUDIRECT_TCPXO, 8,
       200 * kGb},
      {"gcp-a4", "B200", 900e9, 8, 400e9, pb::TRANSPORT_KIND_ROCE, 8, 400 * kGb},
      // Azure ND v5: 8 x 400 Gb/s NDR InfiniBand (3.2 Tb/s per VM).
      {"azure-nd-h100-v5", "H100-SXM", 450e9, 8, 400e9, pb::TRANSPORT_KIND_INFINIBAND, 8,
       400 * kGb},
      {"azure-nd-h200-v5", "H200-SXM", 450e9, 8, 400e9, pb::TRANSPORT_KIND_INFINIBAND, 8,
       400 * kGb},
      {"azure-nd-mi300x-v5", "MI300X", 64e9, 8, 400e9, pb::TRANSPORT_KIND_INFINIBAND, 8, 400 * kGb},
      {"ib-ndr-h100", "H100-SXM", 450e9, 8, 400e9, pb::TRANSPORT_KIND_INFINIBAND, 8, 400 * kGb},
  };
  for (const PresetFigures& f : figures) {
    SCOPED_TRACE(f.preset);
    const pb::ClusterSpec spec = preset(f.preset);
    const pb::NodeType& t = spec.node_types(0);
    EXPECT_EQ(t.device(), f.device);
    EXPECT_EQ(t.devices_per_node(), f.preset == std::string("gb300-nvl72") ? 4 : 8);
    EXPECT_DOUBLE_EQ(t.intra().device_link().bandwidth_bytes_per_s(), f.device_link_bytes_per_s);
    EXPECT_EQ(t.nic().count(), f.nics);
    EXPECT_DOUBLE_EQ(t.nic().link().bandwidth_bytes_per_s(), f.nic_bits_per_s / 8);
    EXPECT_EQ(t.nic().transport().kind(), f.transport);
    const NetDevices net = net_devices(t);
    EXPECT_EQ(net.count, f.net_devices);
    EXPECT_DOUBLE_EQ(net.bytes_per_s, f.net_device_bytes_per_s);
    // NCCL's 2.7 us network hop, plus EFA's 8 us per message (measured on a p5 pair, aws-p5.yaml;
    // the other AWS presets take p5's); no other transport adds latency.
    EXPECT_DOUBLE_EQ(net.latency_s, f.transport == pb::TRANSPORT_KIND_EFA ? 10.7e-6 : 2.7e-6);
  }
  // GB300 racks are one NVLink domain of 18 trays (72 GPUs), as GB200's.
  EXPECT_EQ(preset("gb300-nvl72").node_types(0).intra().domain_nodes(), 18);
}

// Without a transport, the NICs are exactly what the file says (old files keep their numbers).
TEST(TopologiesTransport, AbsentTransportKeepsTheNicsAsWritten) {
  pb::NodeType t = preset("dgx-h100").node_types(0);
  t.mutable_nic()->set_count(16);  // more NICs than GPUs: still 16 devices of one port each
  const NetDevices net = net_devices(t);
  EXPECT_EQ(net.count, 16);
  EXPECT_EQ(net.rails, 1);
  EXPECT_DOUBLE_EQ(net.bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(net.latency_s, 2.7e-6);
}

// Each field moves the devices as formats.md#transport says.
TEST(TopologiesTransport, FieldsShapeTheNetworkDevices) {
  pb::NodeType t = preset("aws-p5").node_types(0);
  pb::TransportSpec& tr = *t.mutable_nic()->mutable_transport();
  tr.set_message_latency_s(10e-6);
  tr.set_bandwidth_efficiency(0.5);
  NetDevices net = net_devices(t);
  EXPECT_EQ(net.count, 8);                              // 32 NICs / 4 per GPU
  EXPECT_DOUBLE_EQ(net.bytes_per_s, 4 * 12.5e9 * 0.5);  // 4 rails x 100 Gb/s x 0.5
  EXPECT_DOUBLE_EQ(net.latency_s, 2.7e-6 + 10e-6);
  tr.set_nics_per_gpu(1);  // no striping: 32 devices of one 100 Gb/s port
  net = net_devices(t);
  EXPECT_EQ(net.count, 32);
  EXPECT_DOUBLE_EQ(net.bytes_per_s, 12.5e9 * 0.5);
  tr.clear_nics_per_gpu();
  tr.set_active_nics(16);  // half the NICs: two striped per GPU
  net = net_devices(t);
  EXPECT_EQ(net.count, 8);
  EXPECT_DOUBLE_EQ(net.bytes_per_s, 2 * 12.5e9 * 0.5);
  // InfiniBand's published defaults: nothing added, full rate.
  ASSERT_TRUE(transport_default(pb::TRANSPORT_KIND_INFINIBAND).has_value());
  EXPECT_EQ(transport_default(pb::TRANSPORT_KIND_INFINIBAND)->bandwidth_efficiency, 1);
  EXPECT_FALSE(transport_default(pb::TRANSPORT_KIND_EFA).has_value());
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
  EXPECT_EQ(builtin_devices().size(), 14u);
  const pb::ClusterSpec none;
  // The A800 is the A100 with fewer NVLink links: the same compute and memory.
  const pb::DeviceSpec& a800 = find_device(none, "A800-SXM-80GB");
  EXPECT_DOUBLE_EQ(peak_flops(a800, "bf16"), 312e12);
  EXPECT_DOUBLE_EQ(a800.memory_bytes(), 81920.0 * 1024 * 1024);
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
  // MI325X: 256 GiB less 16 MiB, derived from the MI300X's exposed total; GB300: rack / 72.
  EXPECT_DOUBLE_EQ(find_device(none, "MI325X").memory_bytes(), 268419072.0 * 1024);
  EXPECT_DOUBLE_EQ(find_device(none, "MI325X").memory_bandwidth_bytes_per_s(), 6e12);
  EXPECT_DOUBLE_EQ(peak_flops(find_device(none, "GB300"), "bf16"), 2.5e15);
  EXPECT_DOUBLE_EQ(peak_flops(find_device(none, "GB300"), "fp4"), 15e15);
  EXPECT_DOUBLE_EQ(find_device(none, "GB300").memory_bytes(), 288e9);
  // Blackwell's MX tensor cores, Ultra included; Hopper has none.
  for (const char* mx : {"B200", "GB200", "GB300"})
    EXPECT_TRUE(find_device(none, mx).mx_formats()) << mx;
  EXPECT_FALSE(h100.mx_formats());
  EXPECT_THROW(find_device(none, "H100"), base::InputError);
  EXPECT_THROW(peak_flops(h100, "bf61"), base::InputError);
}

// Every shipped device states its architecture (kernels are chosen by it, not by the name), each
// the one its vendor's datasheet names, and a cpu device is architecture cpu.
TEST(TopologiesDeviceDb, EveryDeviceStatesItsArchitecture) {
  const std::map<std::string, pb::DeviceArchitecture> expected = {
      {"A100-SXM-40GB", pb::DEVICE_ARCHITECTURE_AMPERE},
      {"A100-SXM-80GB", pb::DEVICE_ARCHITECTURE_AMPERE},
      {"A800-SXM-80GB", pb::DEVICE_ARCHITECTURE_AMPERE},
      {"B200", pb::DEVICE_ARCHITECTURE_BLACKWELL},
      {"GB200", pb::DEVICE_ARCHITECTURE_BLACKWELL},
      {"GB300", pb::DEVICE_ARCHITECTURE_BLACKWELL},
      {"H100-PCIe", pb::DEVICE_ARCHITECTURE_HOPPER},
      {"H100-SXM", pb::DEVICE_ARCHITECTURE_HOPPER},
      {"H200-SXM", pb::DEVICE_ARCHITECTURE_HOPPER},
      {"H800-SXM", pb::DEVICE_ARCHITECTURE_HOPPER},
      {"L40S", pb::DEVICE_ARCHITECTURE_ADA},
      {"MI300X", pb::DEVICE_ARCHITECTURE_CDNA3},
      {"MI325X", pb::DEVICE_ARCHITECTURE_CDNA3},
      {"x86-64-AVX512-core", pb::DEVICE_ARCHITECTURE_CPU}};
  for (const pb::DeviceSpec& d : builtin_devices()) {
    SCOPED_TRACE(d.name());
    EXPECT_NE(d.architecture(), pb::DEVICE_ARCHITECTURE_UNSPECIFIED);
    EXPECT_EQ(d.kind() == pb::DEVICE_KIND_CPU, d.architecture() == pb::DEVICE_ARCHITECTURE_CPU);
    const auto it = expected.find(d.name());
    ASSERT_NE(it, expected.end()) << "a new preset: add its architecture here";
    EXPECT_EQ(d.architecture(), it->second);
  }
  EXPECT_EQ(builtin_devices().size(), expected.size());
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
