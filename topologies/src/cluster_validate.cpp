// validate_cluster: the semantic checks a schema cannot express. Every failure names the field
// path (through the SourceMap, so files get their line) and says what was expected. Checks run
// devices -> node types -> node groups -> fabric, so the first error is the most basic one.
#include <map>
#include <string>

#include "fabric_layout.hpp"
#include "orrery/base/error.hpp"
#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/degradations.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/stragglers.hpp"
#include "orrery/topologies/transport.hpp"
#include "orrery/traces/field_ranges.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::topologies {
namespace {

std::string at(std::string_view list, int i) {
  return std::string(list) + "[" + std::to_string(i) + "]";
}

std::string kind_name(const google::protobuf::EnumDescriptor* e, int value) {
  const auto* v = e->FindValueByNumber(value);
  return v && value != 0 ? enum_value_name(*v) : "unspecified";
}

// Names in a repeated field must be unique: `what` is "device", "node type", ...
template <typename Items>
void check_unique(const Items& items, std::string_view list, std::string_view what,
                  const SourceMap& where) {
  std::map<std::string, int> seen;
  for (int i = 0; i < items.size(); ++i) {
    const std::string& name = items.Get(i).name();
    if (auto [it, fresh] = seen.emplace(name, i); !fresh) {
      where.fail(at(list, i) + ".name", "duplicate " + std::string(what) + " '" + name +
                                            "' (also " + at(list, it->second) + ")");
    }
  }
}

void check_devices(const pb::ClusterSpec& c, const SourceMap& where) {
  check_unique(c.devices(), "devices", "device", where);
  for (int i = 0; i < c.devices_size(); ++i) {
    const pb::DeviceSpec& d = c.devices(i);
    const pb::PeakFlops& p = d.peak_flops();
    if (p.fp64() + p.fp32() + p.tf32() + p.bf16() + p.fp16() + p.fp8() + p.int8() + p.fp4() <= 0) {
      where.fail(
          at("devices", i) + ".peak_flops",
          "every data type is 0; give the dense peak of at least one (e.g. bf16: 989 TFLOPS)");
    }
    if (!(d.memory_bytes() > 0))
      where.fail(at("devices", i) + ".memory_bytes", "expected a value > 0");
    if (!(d.memory_bandwidth_bytes_per_s() > 0)) {
      where.fail(at("devices", i) + ".memory_bandwidth_bytes_per_s", "expected a value > 0");
    }
    // A GPU architecture on a cpu device (or cpu on a gpu) is a contradiction, not a choice.
    const bool cpu_kind = d.kind() == pb::DEVICE_KIND_CPU;
    const bool cpu_arch = d.architecture() == pb::DEVICE_ARCHITECTURE_CPU;
    if (d.architecture() != pb::DEVICE_ARCHITECTURE_UNSPECIFIED && cpu_kind != cpu_arch) {
      where.fail(at("devices", i) + ".architecture",
                 "'" + d.name() + "' is a " + (cpu_kind ? "cpu" : "gpu") + " device: expected " +
                     (cpu_kind ? "cpu" : "a gpu architecture") + ", got " +
                     kind_name(pb::DeviceArchitecture_descriptor(), d.architecture()));
    }
  }
}

void check_link(const pb::LinkSpec& link, const std::string& path, const SourceMap& where) {
  if (!(link.bandwidth_bytes_per_s() > 0)) {
    where.fail(path + ".bandwidth_bytes_per_s", "expected a value > 0");
  }
}

void check_intra(const pb::NodeType& t, const pb::DeviceSpec& device, const std::string& path,
                 const SourceMap& where) {
  const pb::IntraNodeSpec& in = t.intra();
  const std::string kind = kind_name(pb::IntraNodeKind_descriptor(), in.kind());
  if (in.kind() == pb::INTRA_NODE_KIND_UNSPECIFIED) where.fail(path + ".intra.kind", "required");
  const bool cpu = device.kind() == pb::DEVICE_KIND_CPU;
  if (in.kind() == pb::INTRA_NODE_KIND_HOST && !cpu) {
    where.fail(path + ".intra.kind",
               "host is for cpu devices, but '" + device.name() + "' is a gpu");
  }
  if (in.kind() != pb::INTRA_NODE_KIND_HOST && cpu) {
    where.fail(path + ".intra.kind",
               "'" + device.name() +
                   "' is a cpu device, whose cores share the host: expected host, got " + kind);
  }
  static const std::map<int, std::string> kWhatDeviceLinkIs = {
      {pb::INTRA_NODE_KIND_NVSWITCH, "each device's aggregate link into the switch"},
      {pb::INTRA_NODE_KIND_MESH, "the direct link between two devices"},
      {pb::INTRA_NODE_KIND_HOST, "each core's share of memory bandwidth for copies"}};
  if (auto it = kWhatDeviceLinkIs.find(in.kind()); it != kWhatDeviceLinkIs.end()) {
    if (!in.has_device_link()) {
      where.fail(path + ".intra.device_link",
                 "required when intra.kind is " + kind + " (" + it->second + ")");
    }
    check_link(in.device_link(), path + ".intra.device_link", where);
  }
  if (!in.has_pcie_link()) where.fail(path + ".intra.pcie_link", "required");
  check_link(in.pcie_link(), path + ".intra.pcie_link", where);
  if (in.has_devices_per_pcie_switch()) {
    if (in.kind() == pb::INTRA_NODE_KIND_HOST) {
      where.fail(path + ".intra.devices_per_pcie_switch",
                 "cpu cores do not sit behind PCIe switches (intra.kind is host)");
    }
    if (in.devices_per_pcie_switch() <= 0 ||
        t.devices_per_node() % in.devices_per_pcie_switch() != 0) {
      where.fail(path + ".intra.devices_per_pcie_switch",
                 std::to_string(in.devices_per_pcie_switch()) +
                     " does not divide devices_per_node " + std::to_string(t.devices_per_node()));
    }
  }
  if (in.has_domain_nodes() && in.kind() != pb::INTRA_NODE_KIND_NVSWITCH) {
    where.fail(path + ".intra.domain_nodes",
               "only an nvswitch fabric spans several nodes, but intra.kind is " + kind);
  }
  if (in.has_domain_nodes() && in.domain_nodes() <= 0) {
    where.fail(path + ".intra.domain_nodes", "expected a value > 0");
  }
}

// NicSpec.transport: a kind, its fields or their published defaults, NIC counts that split.
void check_transport(const pb::NodeType& t, const std::string& path, const SourceMap& where) {
  const pb::TransportSpec& tr = t.nic().transport();
  const std::string at_t = path + ".nic.transport";
  if (t.nic().count() == 0) {
    where.fail(at_t, "describes the transport of no NICs (nic.count is 0)");
  }
  if (tr.kind() == pb::TRANSPORT_KIND_UNSPECIFIED) where.fail(at_t + ".kind", "required");
  const std::string kind = kind_name(pb::TransportKind_descriptor(), tr.kind());
  if (!transport_default(tr.kind())) {
    for (const auto& [has, field] :
         {std::pair{tr.has_message_latency_s(), "message_latency_s"},
          std::pair{tr.has_bandwidth_efficiency(), "bandwidth_efficiency"}}) {
      if (!has) {
        where.fail(at_t + "." + field,
                   std::string("required for transport kind ") + kind +
                       ", which has no published default (measure it, e.g. with nccl-tests)");
      }
    }
  }
  const int64_t active = tr.has_active_nics() ? tr.active_nics() : t.nic().count();
  if (tr.has_active_nics() && active > t.nic().count()) {
    where.fail(at_t + ".active_nics", "got " + std::to_string(active) +
                                          ", more NICs than nic.count (" +
                                          std::to_string(t.nic().count()) + ")");
  }
  const int64_t gpus = t.devices_per_node();
  if (tr.has_nics_per_gpu() && tr.nics_per_gpu() > 1 && tr.nics_per_gpu() * gpus != active) {
    where.fail(at_t + ".nics_per_gpu", "got " + std::to_string(tr.nics_per_gpu()) + ", but " +
                                           std::to_string(gpus) +
                                           " GPUs striping over that many NICs each need " +
                                           std::to_string(tr.nics_per_gpu() * gpus) +
                                           " active NICs, not " + std::to_string(active));
  }
  if (!tr.has_nics_per_gpu() && active > gpus && active % gpus != 0) {
    where.fail(at_t + ".nics_per_gpu", "required: " + std::to_string(active) +
                                           " active NICs do not split evenly over " +
                                           std::to_string(gpus) + " GPUs");
  }
}

void check_node_types(const pb::ClusterSpec& c, const SourceMap& where) {
  check_unique(c.node_types(), "node_types", "node type", where);
  for (int i = 0; i < c.node_types_size(); ++i) {
    const pb::NodeType& t = c.node_types(i);
    const std::string path = at("node_types", i);
    const pb::DeviceSpec* device = lookup_device(c, t.device());
    if (device == nullptr) {
      where.fail(path + ".device", "unknown device '" + t.device() + "'" +
                                       base::suggest(t.device(), device_names(c)));
    }
    if (t.devices_per_node() <= 0) where.fail(path + ".devices_per_node", "expected a value > 0");
    check_intra(t, *device, path, where);
    if (t.nic().count() < 0) where.fail(path + ".nic.count", "expected a value >= 0");
    if (t.nic().count() > 0) {
      if (!t.nic().has_link()) {
        where.fail(path + ".nic.link", "required when nic.count is " +
                                           std::to_string(t.nic().count()) +
                                           " (one NIC port's bandwidth and latency)");
      }
      check_link(t.nic().link(), path + ".nic.link", where);
    }
    if (t.nic().has_transport()) check_transport(t, path, where);
  }
}

int node_type_index(const pb::ClusterSpec& c, const std::string& name) {
  for (int i = 0; i < c.node_types_size(); ++i) {
    if (c.node_types(i).name() == name) return i;
  }
  return -1;
}

void check_node_groups(const pb::ClusterSpec& c, const SourceMap& where) {
  check_unique(c.node_groups(), "node_groups", "node group", where);
  std::vector<std::string> type_names;
  for (const auto& t : c.node_types()) type_names.push_back(t.name());
  for (int i = 0; i < c.node_groups_size(); ++i) {
    const pb::NodeGroup& g = c.node_groups(i);
    const std::string path = at("node_groups", i);
    const int ti = node_type_index(c, g.node_type());
    if (ti < 0) {
      where.fail(path + ".node_type", "unknown node type '" + g.node_type() + "'" +
                                          base::suggest(g.node_type(), type_names));
    }
    if (g.count() <= 0) where.fail(path + ".count", "expected a value > 0");
    const pb::IntraNodeSpec& in = c.node_types(ti).intra();
    if (in.has_domain_nodes() && g.count() % in.domain_nodes() != 0) {
      where.fail(path + ".count", std::to_string(g.count()) +
                                      " nodes do not fill whole NVLink domains of " +
                                      std::to_string(in.domain_nodes()) + " nodes (" +
                                      at("node_types", ti) + ".intra.domain_nodes)");
    }
  }
}

void check_fabric_none(const pb::ClusterSpec& c, const SourceMap& where) {
  if (c.node_groups_size() > 1) {
    where.fail("fabric.kind", "none cannot join " + std::to_string(c.node_groups_size()) +
                                  " node groups; choose a scale-out fabric");
  }
  const pb::NodeGroup& g = c.node_groups(0);
  const pb::IntraNodeSpec& in = c.node_types(node_type_index(c, g.node_type())).intra();
  const int64_t domain = in.has_domain_nodes() ? in.domain_nodes() : 1;
  if (g.count() > domain) {
    where.fail("fabric.kind", "none joins no nodes, but the cluster has " +
                                  std::to_string(g.count()) +
                                  " nodes (only one node or one NVLink domain needs no fabric)");
  }
}

void check_fabric(const pb::ClusterSpec& c, const SourceMap& where) {
  const pb::FabricSpec& f = c.fabric();
  if (f.kind() == pb::FABRIC_KIND_UNSPECIFIED) where.fail("fabric.kind", "required");
  if (f.kind() == pb::FABRIC_KIND_NONE) return check_fabric_none(c, where);
  const std::string kind = kind_name(pb::FabricKind_descriptor(), f.kind());
  int first_type = -1;
  for (int i = 0; i < c.node_groups_size(); ++i) {
    const int ti = node_type_index(c, c.node_groups(i).node_type());
    const pb::NodeType& t = c.node_types(ti);
    if (t.nic().count() == 0) {
      where.fail(at("node_types", ti) + ".nic.count",
                 "got 0, but a " + kind + " fabric needs at least one NIC per node (node group '" +
                     c.node_groups(i).name() + "')");
    }
    if (first_type < 0) first_type = ti;
    const pb::NodeType& first = c.node_types(first_type);
    const int64_t rails = net_devices(t).count, first_rails = net_devices(first).count;
    if (f.kind() == pb::FABRIC_KIND_RAIL_OPTIMIZED && rails != first_rails) {
      where.fail(at("node_groups", i) + ".node_type",
                 "a rail_optimized fabric needs the same NIC count on every node, but '" +
                     first.name() + "' has " + std::to_string(first_rails) + " and '" + t.name() +
                     "' has " + std::to_string(rails));
    }
  }
  if (f.has_switch_link()) check_link(f.switch_link(), "fabric.switch_link", where);
  (void)detail::plan_fabric(c, where);
}

}  // namespace

void validate_cluster(const pb::ClusterSpec& cluster, const SourceMap& where) {
  if (cluster.name().empty()) where.fail("name", "required");
  if (cluster.node_types_size() == 0) where.fail("node_types", "must not be empty");
  if (cluster.node_groups_size() == 0) where.fail("node_groups", "must not be empty");
  check_field_values(cluster, where);  // a spec made in code, or resized, gets a file's ranges
  check_devices(cluster, where);
  check_node_types(cluster, where);
  check_node_groups(cluster, where);
  check_fabric(cluster, where);
  check_stragglers(cluster, where);
  check_degradations(cluster, where);
}

}  // namespace orrery::topologies
