// The cluster each measured table ran on, rebuilt from the table's own description: A100 tables
// on a DGX A100-like node with the table's NIC rate, H100 on DGX H100, B200 on an HGX B200
// cluster built here (no preset exists for it), sized to the table's node count.
#include "collective_validation_clusters.hpp"

#include <regex>

#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"

namespace orrery::validation::detail {
namespace {

// NVIDIA HGX B200: 8 B200 on fifth-generation NVSwitch at 1.8 TB/s bidirectional per GPU
// (900 GB/s each way); 8 ConnectX-7 400 Gb/s NICs, one per GPU, each beside its GPU on a PCIe
// Gen5 x16 switch (63 GB/s). Latencies as in the DGX presets (NCCL's hardware latency table:
// NVLink 0.6 us, PCIe 1 us, network 2.7 us; 130 ns per InfiniBand switch), rail-optimised
// fabric of 64-port Quantum-2 switches as in the DGX H100 preset.
constexpr double kB200NvlinkBytesPerS = 900e9;
constexpr double kGen5PcieBytesPerS = 63e9;
constexpr double kNdrNicBytesPerS = 400e9 / 8;
constexpr double kNvlinkLatencyS = 0.6e-6;
constexpr double kPcieLatencyS = 1e-6;
constexpr double kNicLatencyS = 2.7e-6;
constexpr double kIbSwitchLatencyS = 130e-9;
constexpr int64_t kQuantum2Radix = 64;

void set_link(pb::LinkSpec* link, double bytes_per_s, double latency_s) {
  link->set_bandwidth_bytes_per_s(bytes_per_s);
  link->set_latency_s(latency_s);
}

pb::ClusterSpec hgx_b200() {
  pb::ClusterSpec c;
  c.set_name("hgx-b200");
  c.set_description("HGX B200: 8 x B200 per node, NVSwitch 900 GB/s/dir, 8 x 400 Gb/s NDR, rail-optimized");
  pb::NodeType* t = c.add_node_types();
  t->set_name("hgx-b200");
  t->set_device("B200");
  t->set_devices_per_node(8);
  pb::IntraNodeSpec* intra = t->mutable_intra();
  intra->set_kind(pb::INTRA_NODE_KIND_NVSWITCH);
  set_link(intra->mutable_device_link(), kB200NvlinkBytesPerS, kNvlinkLatencyS);
  set_link(intra->mutable_pcie_link(), kGen5PcieBytesPerS, kPcieLatencyS);
  set_link(intra->mutable_host_link(), kGen5PcieBytesPerS, kPcieLatencyS);
  intra->set_devices_per_pcie_switch(1);
  t->mutable_nic()->set_count(8);
  set_link(t->mutable_nic()->mutable_link(), kNdrNicBytesPerS, kNicLatencyS);
  pb::NodeGroup* g = c.add_node_groups();
  g->set_name("b200");
  g->set_node_type("hgx-b200");
  g->set_count(1);
  pb::FabricSpec* f = c.mutable_fabric();
  f->set_kind(pb::FABRIC_KIND_RAIL_OPTIMIZED);
  f->set_switch_radix(kQuantum2Radix);
  f->set_tiers(2);
  f->set_oversubscription(1);
  set_link(f->mutable_switch_link(), kNdrNicBytesPerS, 0);
  f->set_switch_latency_s(kIbSwitchLatencyS);
  return c;
}

// "8x HDR 200 Gb/s InfiniBand per VM" -> NIC count 8 and 25e9 bytes/s; nothing when the table
// names no rate.
void apply_nic_text(const std::string& inter, pb::NodeType& type) {
  std::smatch m;
  if (std::regex_search(inter, m, std::regex(R"((\d+(?:\.\d+)?)\s*Gb/s)"))) {
    type.mutable_nic()->mutable_link()->set_bandwidth_bytes_per_s(std::stod(m[1].str()) * 1e9 / 8);
  }
  if (std::regex_search(inter, m, std::regex(R"((\d+)\s*x\s)"))) {
    type.mutable_nic()->set_count(std::stoll(m[1].str()));
  }
}

}  // namespace

MappedCluster map_cluster(const MeasuredTable& table) {
  MappedCluster out;
  pb::ClusterSpec spec;
  if (table.gpu.find("A100") != std::string::npos) {
    spec = topologies::preset("dgx-a100");
    pb::NodeType& type = *spec.mutable_node_types(0);
    type.set_device(table.gpu.find("40GB") != std::string::npos ? "A100-SXM-40GB" : "A100-SXM-80GB");
    apply_nic_text(table.inter, type);
  } else if (table.gpu.find("H100") != std::string::npos) {
    spec = topologies::preset("dgx-h100");
  } else if (table.gpu.find("B200") != std::string::npos) {
    spec = hgx_b200();
  } else {
    out.skip_reason = "no cluster for GPU '" + table.gpu + "' (known: A100, H100, B200)";
    return out;
  }
  const int64_t per_node = spec.node_types(0).devices_per_node();
  if (table.gpus_per_node > per_node) {
    out.skip_reason = std::to_string(table.gpus_per_node) + " GPUs per node, but a " + spec.name() +
                      " node has " + std::to_string(per_node);
    return out;
  }
  topologies::resize(spec, table.nodes);
  topologies::validate_cluster(spec, SourceMap());
  const auto& type = spec.node_types(0);
  out.description = spec.name() + " x " + std::to_string(table.nodes) + " (" + type.device() + ", " +
                    std::to_string(type.nic().count()) + " x " +
                    std::to_string(static_cast<int64_t>(type.nic().link().bandwidth_bytes_per_s() * 8 / 1e9)) +
                    " Gb/s NICs per node; GPUs 0-" + std::to_string(table.gpus_per_node - 1) + " of each node)";
  out.topology = std::make_unique<topologies::Topology>(spec);
  for (int64_t n = 0; n < table.nodes; ++n) {
    for (int64_t i = 0; i < table.gpus_per_node; ++i) out.devices.push_back(n * per_node + i);
  }
  return out;
}

}  // namespace orrery::validation::detail
