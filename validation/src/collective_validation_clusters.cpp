// The cluster each measured table ran on, rebuilt from the table's own description: the cloud
// instance its `system` names (AWS p4d/p4de/p5/p5e/p6, GCP A3 High/Mega and A4, Azure ND H100 /
// H200 / MI300X v5) or else the node its `gpu` names (A100 and H100 as DGX, HGX A800, HGX H200,
// H800, HGX B200, GB200 and GB300 as NVL72 trays, MI300X, MI325X), the NICs and transport its
// `inter` text gives, sized to its node count. Every cluster is a preset
// (topologies/presets/clusters).
#include "collective_validation_clusters.hpp"

#include <algorithm>
#include <regex>

#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/transport.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::validation::detail {
namespace {

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
  // The node is a cloud instance the `system` names: its NICs are part of the product, so an
  // `inter` text that gives no count and rate keeps them.
  bool cloud_instance = false;
};

// Cloud instances by the words of `system`, most specific first (p5e before p5); empty: none.
std::string cloud_preset_for(const std::string& system) {
  // Whole words (names()): "p5" is not in "p5e" or "p5en", "p4d" not in "p4de".
  static const std::pair<const char*, const char*> kInstances[] = {
      {"p4d", "aws-p4d"},
      {"p4de", "aws-p4de"},
      {"p5", "aws-p5"},
      {"p5e", "aws-p5e"},
      {"p6-b200", "aws-p6"},
      {"a3-highgpu-8g", "gcp-a3-high"},
      {"A3 High", "gcp-a3-high"},
      {"a3-megagpu-8g", "gcp-a3-mega"},
      {"A3 Mega", "gcp-a3-mega"},
      {"a4-highgpu-8g", "gcp-a4"},
      {"GCP A4", "gcp-a4"},
      {"ND H100 v5", "azure-nd-h100-v5"},
      {"ND96isr_H100_v5", "azure-nd-h100-v5"},
      {"ND H200 v5", "azure-nd-h200-v5"},
      {"ND96isr_H200_v5", "azure-nd-h200-v5"},
      {"ND MI300X v5", "azure-nd-mi300x-v5"},
      {"ND96isr_MI300X_v5", "azure-nd-mi300x-v5"}};
  for (const auto& [words, preset] : kInstances) {
    if (names(system, words)) return preset;
  }
  return {};
}

NodeChoice node_for(const std::string& system, const std::string& gpu) {
  NodeChoice c;
  if (const std::string cloud = cloud_preset_for(system); !cloud.empty()) {
    c.spec = topologies::preset(cloud);
    c.cloud_instance = true;
  } else if (names(gpu, "PCIe")) {
    c.skip_reason =
        "gpu: '" + gpu +
        "' is a PCIe card; every cluster here joins its GPUs by NVLink or Infinity Fabric";
  } else if (names(gpu, "A100")) {
    c.spec = topologies::preset("dgx-a100");
    c.spec.mutable_node_types(0)->set_device(names(gpu, "40GB") ? "A100-SXM-40GB"
                                                                : "A100-SXM-80GB");
  } else if (names(gpu, "A800")) {
    c.spec = topologies::preset("hgx-a800");
  } else if (names(gpu, "H100")) {
    c.spec = topologies::preset("dgx-h100");
  } else if (names(gpu, "H200")) {
    c.spec = topologies::preset("hgx-h200");
  } else if (names(gpu, "H800")) {
    c.spec = topologies::preset("h800");
  } else if (names(gpu, "GB300")) {
    c.spec = topologies::preset("gb300-nvl72");
  } else if (names(gpu, "GB200")) {
    c.spec = topologies::preset("gb200-nvl72");
  } else if (names(gpu, "B200")) {
    c.spec = topologies::preset("hgx-b200");
  } else if (names(gpu, "MI300X")) {
    c.spec = topologies::preset("mi300x");
  } else if (names(gpu, "MI325X")) {
    c.spec = topologies::preset("mi325x");
  } else {
    c.skip_reason = "gpu: '" + gpu +
                    "' names none of A100, A800, H100, H200, H800, B200, GB200, GB300, MI300X, "
                    "MI325X";
  }
  return c;
}

// The NICs `inter` describes per table node: "8x HDR 200 Gb/s", "InfiniBand NDR 8x400 Gb/s",
// "4x100 Gb/s", or "400 Gb/s per GPU". Returns the reason when a multi-node table's text gives no
// count and rate; single-node tables use no NIC and keep the node's, and so does a named cloud
// instance (`keeps_instance_nics`), whose NICs the instance type fixes.
std::string apply_nic_text(const MeasuredTable& table, int64_t table_nodes_per_model_node,
                           bool keeps_instance_nics, pb::NodeType& type) {
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
    if (table.nodes == 1 || keeps_instance_nics) return {};
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

// The transport `inter` names, by whole words: EFA, TCPXO, TCPX, RoCE, or InfiniBand (also IB,
// HDR, NDR, XDR); UNSPECIFIED when it names none.
pb::TransportKind transport_named(const std::string& inter) {
  if (names(inter, "EFA")) return pb::TRANSPORT_KIND_EFA;
  if (names(inter, "TCPXO")) return pb::TRANSPORT_KIND_GPUDIRECT_TCPXO;
  if (names(inter, "TCPX")) return pb::TRANSPORT_KIND_GPUDIRECT_TCPX;
  if (names(inter, "RoCE") || names(inter, "RoCEv2")) return pb::TRANSPORT_KIND_ROCE;
  for (const char* word : {"InfiniBand", "IB", "HDR", "NDR", "XDR"}) {
    if (names(inter, word)) return pb::TRANSPORT_KIND_INFINIBAND;
  }
  return pb::TRANSPORT_KIND_UNSPECIFIED;
}

// The transport `inter` names replaces the node's (its NIC split is then the kind's default). A
// kind without a published default takes the values of the cloud preset that runs it, so the
// assumption is written once, in that preset's file.
void apply_transport_text(const MeasuredTable& table, pb::NodeType& type) {
  const pb::TransportKind kind = transport_named(table.inter);
  if (kind == pb::TRANSPORT_KIND_UNSPECIFIED) return;
  pb::NicSpec& nic = *type.mutable_nic();
  if (nic.has_transport() && nic.transport().kind() == kind) return;
  pb::TransportSpec t;
  t.set_kind(kind);
  if (!topologies::transport_default(kind)) {
    const char* reference = kind == pb::TRANSPORT_KIND_EFA              ? "aws-p5"
                            : kind == pb::TRANSPORT_KIND_GPUDIRECT_TCPX ? "gcp-a3-high"
                                                                        : "gcp-a3-mega";
    const pb::TransportSpec r = topologies::preset(reference).node_types(0).nic().transport();
    t.set_message_latency_s(r.message_latency_s());
    t.set_bandwidth_efficiency(r.bandwidth_efficiency());
  }
  *nic.mutable_transport() = t;
}

std::string describe(const pb::ClusterSpec& spec, int64_t nodes, int64_t gpus_per_node) {
  const auto& type = spec.node_types(0);
  const std::string transport =
      type.nic().has_transport()
          ? " over " + enum_value_name(*pb::TransportKind_descriptor()->FindValueByNumber(
                           type.nic().transport().kind()))
          : "";
  return spec.name() + " x " + std::to_string(nodes) + " (" + type.device() + ", " +
         std::to_string(type.nic().count()) + " x " +
         std::to_string(static_cast<int64_t>(type.nic().link().bandwidth_bytes_per_s() * 8 / 1e9)) +
         " Gb/s NICs per node" + transport + "; GPUs 0-" + std::to_string(gpus_per_node - 1) +
         " of each node)";
}

}  // namespace

MappedCluster map_cluster(const MeasuredTable& table) {
  MappedCluster out;
  NodeChoice node = node_for(table.system, table.gpu);
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
  out.skip_reason = apply_nic_text(table, fold, node.cloud_instance, *spec.mutable_node_types(0));
  if (!out.skip_reason.empty()) return out;
  apply_transport_text(table, *spec.mutable_node_types(0));
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
