// The cluster each measured table ran on, rebuilt from the table's own description: the node its
// `gpu` names (A100 and H100 as DGX, H200 on the HGX H100 board, H800, B200 on an HGX B200 built
// here, GB200 as NVL72 trays, MI300X), the NICs its `inter` text gives, sized to its node count.
#include "collective_validation_clusters.hpp"

#include <algorithm>
#include <regex>

#include "orrery/base/error.hpp"
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
  c.set_description(
      "HGX B200: 8 x B200 per node, NVSwitch 900 GB/s/dir, 8 x 400 Gb/s NDR, rail-optimized");
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

// `name` as a whole word of `text` (letters and digits around it do not count): "B200" is not in
// "GB200".
bool names(const std::string& text, const char* name) {
  return std::regex_search(
      text,
      std::regex(std::string("(^|[^A-Za-z0-9])") + name + "($|[^A-Za-z0-9])", std::regex::icase));
}

// The node a table's `gpu` names, from the vocabulary docs/formats.md#collective-tables lists;
// empty name: unmatched.
struct NodeChoice {
  pb::ClusterSpec spec;
  std::string skip_reason;
};

NodeChoice node_for(const std::string& gpu) {
  NodeChoice c;
  if (names(gpu, "PCIe")) {
    c.skip_reason =
        "gpu: '" + gpu +
        "' is a PCIe card; every cluster here joins its GPUs by NVLink or Infinity Fabric";
  } else if (names(gpu, "A100")) {
    c.spec = topologies::preset("dgx-a100");
    c.spec.mutable_node_types(0)->set_device(names(gpu, "40GB") ? "A100-SXM-40GB"
                                                                : "A100-SXM-80GB");
  } else if (names(gpu, "H100")) {
    c.spec = topologies::preset("dgx-h100");
  } else if (names(gpu, "H200")) {
    // HGX H200: the HGX H100 baseboard (NVLink4 through NVSwitch) with H200s.
    c.spec = topologies::preset("dgx-h100");
    c.spec.mutable_node_types(0)->set_device("H200-SXM");
  } else if (names(gpu, "H800")) {
    c.spec = topologies::preset("h800");
  } else if (names(gpu, "GB200")) {
    c.spec = topologies::preset("gb200-nvl72");
  } else if (names(gpu, "B200")) {
    c.spec = hgx_b200();
  } else if (names(gpu, "MI300X")) {
    c.spec = topologies::preset("mi300x");
  } else {
    c.skip_reason = "gpu: '" + gpu + "' names none of A100, H100, H200, H800, B200, GB200, MI300X";
  }
  return c;
}

// The NICs `inter` describes per table node: "8x HDR 200 Gb/s", "InfiniBand NDR 8x400 Gb/s",
// "4x100 Gb/s", or "400 Gb/s per GPU". Returns the reason when a multi-node table's text gives no
// count and rate; single-node tables use no NIC and keep the node's.
std::string apply_nic_text(const MeasuredTable& table, int64_t table_nodes_per_model_node,
                           pb::NodeType& type) {
  // Bits only: "GB/s" (bytes) is not a NIC rate here.
  const std::regex counted(
      R"((\d+)\s*[xX]\s*(?:[A-Za-z][A-Za-z0-9-]*\s+){0,3}(\d+(?:\.\d+)?)\s*(?:Gb/s|Gbps|Gbit/s))");
  const std::regex per_gpu(R"((\d+(?:\.\d+)?)\s*(?:Gb/s|Gbps|Gbit/s)\s+[Pp]er\s+GPU)");
  std::smatch m;
  double count = 0, gbps = 0;
  if (std::regex_search(table.inter, m, counted)) {
    count = std::stod(m[1].str()), gbps = std::stod(m[2].str());
  } else if (std::regex_search(table.inter, m, per_gpu)) {
    count = static_cast<double>(table.gpus_per_node), gbps = std::stod(m[1].str());
  } else {
    if (table.nodes == 1) return {};
    return "inter: '" + table.inter + "' gives no NIC count and rate (write e.g. '8x 400 Gb/s')";
  }
  // A table node that spans several model nodes (a GB200 rack of trays) shares its NICs out.
  count /= static_cast<double>(table_nodes_per_model_node);
  if (count < 1 || count != static_cast<double>(static_cast<int64_t>(count))) {
    return "inter: '" + table.inter + "' does not split evenly over " +
           std::to_string(table_nodes_per_model_node) + " " + type.name() + " nodes";
  }
  type.mutable_nic()->set_count(static_cast<int64_t>(count));
  type.mutable_nic()->mutable_link()->set_bandwidth_bytes_per_s(gbps * 1e9 / 8);
  return {};
}

std::string describe(const pb::ClusterSpec& spec, int64_t nodes, int64_t gpus_per_node) {
  const auto& type = spec.node_types(0);
  return spec.name() + " x " + std::to_string(nodes) + " (" + type.device() + ", " +
         std::to_string(type.nic().count()) + " x " +
         std::to_string(static_cast<int64_t>(type.nic().link().bandwidth_bytes_per_s() * 8 / 1e9)) +
         " Gb/s NICs per node; GPUs 0-" + std::to_string(gpus_per_node - 1) + " of each node)";
}

}  // namespace

MappedCluster map_cluster(const MeasuredTable& table) {
  MappedCluster out;
  NodeChoice node = node_for(table.gpu);
  if (!node.skip_reason.empty()) {
    out.skip_reason = node.skip_reason;
    return out;
  }
  pb::ClusterSpec& spec = node.spec;
  const auto& type = spec.node_types(0);
  const int64_t per_node = type.devices_per_node();
  // A table node larger than the cluster's node is folded onto whole nodes of one NVLink domain
  // (a 72-GPU NVL72 rack as 18 trays of 4); otherwise the table ran on nodes like ours.
  const int64_t domain = type.intra().has_domain_nodes() ? type.intra().domain_nodes() : 1;
  const int64_t fold = table.gpus_per_node > per_node && table.gpus_per_node % per_node == 0 &&
                               table.gpus_per_node / per_node <= domain
                           ? table.gpus_per_node / per_node
                           : 1;
  if (table.gpus_per_node > per_node * fold) {
    out.skip_reason = "gpus_per_node: " + std::to_string(table.gpus_per_node) +
                      " GPUs per node, but a " + spec.name() + " node has " +
                      std::to_string(per_node);
    return out;
  }
  out.skip_reason = apply_nic_text(table, fold, *spec.mutable_node_types(0));
  if (!out.skip_reason.empty()) return out;
  const int64_t nodes = table.nodes * fold;
  try {
    // Whole NVLink domains (two GB200 trays sit in a rack of 18); the table uses the first nodes.
    topologies::resize(spec, (nodes + domain - 1) / domain * domain);
    topologies::validate_cluster(spec, SourceMap());
  } catch (const base::InputError& e) {
    out.skip_reason =
        "the cluster rebuilt from gpu, nodes and inter is not valid: " + std::string(e.what());
    return out;
  }
  const int64_t used = std::min(per_node, table.gpus_per_node);
  out.description = describe(spec, nodes, used);
  out.topology = std::make_unique<topologies::Topology>(spec);
  for (int64_t n = 0; n < nodes; ++n) {
    for (int64_t i = 0; i < used; ++i) out.devices.push_back(n * per_node + i);
  }
  return out;
}

}  // namespace orrery::validation::detail
