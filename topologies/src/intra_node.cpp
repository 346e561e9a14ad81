// The inside of every node. Construction rules (they decide which links in-node traffic shares):
//   - nvswitch: each device has one edge pair of `device_link` to its NVSwitch vertex, which
//     stands for the whole non-blocking switch fabric; with domain_nodes > 1 one NVSwitch vertex
//     serves `domain_nodes` consecutive nodes of the group (GB200 NVL72).
//   - mesh: every pair of devices has its own `device_link` edge pair.
//   - pcie / nvswitch / mesh: device i hangs off PCIe switch i / devices_per_pcie_switch by
//     `pcie_link`; every PCIe switch reaches the host by `host_link` (a switch's upstream port is
//     the same generation and width as its downstream ones, so `pcie_link` when absent).
//   - host (CPU cores as devices): each core has `device_link` (its share of memory bandwidth)
//     to the host vertex; there are no PCIe switches, NICs hang off the host.
//   - NICs are the transport's network devices (transport.hpp: a p5 GPU's four EFA NICs are one
//     device of four times the rate; without a transport, nic.count NICs as written).
//   - NIC j of c sits on PCIe switch j * switches / c (beside the devices it serves: DGX puts 2
//     GPUs and 2 NICs under each of 4 switches), by `pcie_link`.
//   - Latency: a link spec's latency is what a transfer pays crossing that layer once, end to
//     end (GPU to GPU through the NVSwitch, GPU to NIC through the PCIe switch), so each of the
//     two edges it crosses carries half. A mesh link is one edge and carries all of it.
#include <string>

#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/transport.hpp"
#include "topology_builder.hpp"

namespace orrery::topologies::detail {
namespace {

const pb::NodeType& node_type_of(const pb::ClusterSpec& cluster, const pb::NodeGroup& group) {
  for (const auto& t : cluster.node_types()) {
    if (t.name() == group.node_type()) return t;
  }
  ORRERY_CHECK(false, "node type " + group.node_type() + " of a validated cluster is missing");
}

struct NodeContext {
  int64_t node;
  int group;
  const pb::NodeType* type;
  bool cpu;
  std::string prefix;  // "n12."
};

std::vector<Vertex> add_devices(const NodeContext& ctx, GraphBuilder& b,
                                std::vector<DeviceInfo>& devices, int64_t nvlink_domain) {
  std::vector<Vertex> out;
  for (int64_t i = 0; i < ctx.type->devices_per_node(); ++i) {
    const auto index = static_cast<int64_t>(devices.size());
    const Vertex v =
        b.vertex(VertexKind::kDevice, ctx.prefix + (ctx.cpu ? "cpu" : "gpu") + std::to_string(i),
                 ctx.node, index);
    devices.push_back({v, ctx.node, i, ctx.group, ctx.type->device(), nvlink_domain});
    out.push_back(v);
  }
  return out;
}

void add_nvlinks(const pb::IntraNodeSpec& intra, const std::vector<Vertex>& devs, Vertex nvswitch,
                 GraphBuilder& b) {
  const auto& l = intra.device_link();
  if (intra.kind() == pb::INTRA_NODE_KIND_NVSWITCH) {
    for (Vertex d : devs) {
      b.link(d, nvswitch, LinkKind::kNvLink, l.bandwidth_bytes_per_s(), l.latency_s() / 2,
             l.latency_s() / 2);
    }
  } else if (intra.kind() == pb::INTRA_NODE_KIND_MESH) {
    for (size_t i = 0; i < devs.size(); ++i) {
      for (size_t j = i + 1; j < devs.size(); ++j) {
        b.link(devs[i], devs[j], LinkKind::kNvLink, l.bandwidth_bytes_per_s(), l.latency_s(),
               l.latency_s());
      }
    }
  }
}

// PCIe switches, host and NICs; returns the NICs.
std::vector<Vertex> add_io(const NodeContext& ctx, const std::vector<Vertex>& devs,
                           GraphBuilder& b) {
  const pb::IntraNodeSpec& intra = ctx.type->intra();
  const pb::LinkSpec& pcie = intra.pcie_link();
  const Vertex host = b.vertex(VertexKind::kHost, ctx.prefix + "host", ctx.node);
  std::vector<Vertex> switches;
  if (intra.kind() == pb::INTRA_NODE_KIND_HOST) {
    const auto& l = intra.device_link();
    for (Vertex d : devs) {
      b.link(d, host, LinkKind::kHostLink, l.bandwidth_bytes_per_s(), l.latency_s() / 2,
             l.latency_s() / 2);
    }
  } else {
    const pb::LinkSpec& up = intra.has_host_link() ? intra.host_link() : pcie;
    const int64_t per_switch =
        intra.has_devices_per_pcie_switch() ? intra.devices_per_pcie_switch() : 1;
    for (int64_t s = 0; s < ctx.type->devices_per_node() / per_switch; ++s) {
      const Vertex sw =
          b.vertex(VertexKind::kPcieSwitch, ctx.prefix + "pcie" + std::to_string(s), ctx.node);
      b.link(sw, host, LinkKind::kHostLink, up.bandwidth_bytes_per_s(), up.latency_s() / 2,
             up.latency_s() / 2);
      switches.push_back(sw);
    }
    for (size_t i = 0; i < devs.size(); ++i) {
      b.link(devs[i], switches[i / static_cast<size_t>(per_switch)], LinkKind::kPcie,
             pcie.bandwidth_bytes_per_s(), pcie.latency_s() / 2, pcie.latency_s() / 2);
    }
  }
  std::vector<Vertex> nics;
  const int64_t count = net_devices(*ctx.type).count;
  for (int64_t j = 0; j < count; ++j) {
    const Vertex nic = b.vertex(VertexKind::kNic, ctx.prefix + "nic" + std::to_string(j), ctx.node);
    const Vertex attach =
        switches.empty()
            ? host
            : switches[static_cast<size_t>(j * static_cast<int64_t>(switches.size()) / count)];
    b.link(nic, attach, LinkKind::kPcie, pcie.bandwidth_bytes_per_s(), pcie.latency_s() / 2,
           pcie.latency_s() / 2);
    nics.push_back(nic);
  }
  return nics;
}

}  // namespace

std::vector<NodeVertices> build_nodes(const pb::ClusterSpec& cluster, GraphBuilder& b,
                                      std::vector<DeviceInfo>& devices) {
  std::vector<NodeVertices> nodes;
  int64_t node = 0, domains = 0;
  for (int g = 0; g < cluster.node_groups_size(); ++g) {
    const pb::NodeGroup& group = cluster.node_groups(g);
    const pb::NodeType& type = node_type_of(cluster, group);
    const pb::IntraNodeSpec& intra = type.intra();
    const bool cpu = find_device(cluster, type.device()).kind() == pb::DEVICE_KIND_CPU;
    const int64_t domain_nodes = intra.has_domain_nodes() ? intra.domain_nodes() : 1;
    Vertex nvswitch = 0;
    int64_t domain = -1;
    for (int64_t k = 0; k < group.count(); ++k, ++node) {
      const NodeContext ctx{node, g, &type, cpu, "n" + std::to_string(node) + "."};
      if (intra.kind() == pb::INTRA_NODE_KIND_NVSWITCH && k % domain_nodes == 0) {
        domain = domains++;
        nvswitch =
            domain_nodes == 1
                ? b.vertex(VertexKind::kNvSwitch, ctx.prefix + "nvswitch", node)
                : b.vertex(VertexKind::kNvSwitch, "domain" + std::to_string(domain) + ".nvswitch");
      } else if (intra.kind() == pb::INTRA_NODE_KIND_MESH) {
        domain = domains++;
      }
      const auto devs = add_devices(ctx, b, devices, domain);
      add_nvlinks(intra, devs, nvswitch, b);
      NodeVertices nv;
      nv.nics = add_io(ctx, devs, b);
      const NetDevices net = net_devices(type);
      nv.nic_bandwidth_bytes_per_s = net.bytes_per_s;
      nv.nic_latency_s = net.latency_s;
      nodes.push_back(std::move(nv));
    }
  }
  return nodes;
}

}  // namespace orrery::topologies::detail
