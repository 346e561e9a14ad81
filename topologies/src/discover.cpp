// discover_local_machine: hwloc for cores, memory and NICs, /proc/cpuinfo for the cores' peak,
// nvidia-smi for GPUs. What is measured and what is derived is written into the spec's
// description so nobody mistakes an estimate for a measurement.
#include <hwloc.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "orrery/base/error.hpp"
#include "orrery/base/units.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/discover.hpp"

namespace orrery::topologies {
namespace {

struct Machine {
  int64_t cores = 0;
  int64_t numa_nodes = 0;
  double memory_bytes = 0;
  std::vector<double> nic_bytes_per_s;  // NICs whose port speed is known
  double nic_pcie_bytes_per_s = 0;      // the slowest NIC's PCIe link (hwloc), 0 if unknown
};

double read_number_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  double v = 0;
  return (in >> v) ? v : 0;
}

// Port speed of a network or InfiniBand OS device, from sysfs; 0 when unknown.
double nic_speed(const hwloc_obj_t osdev) {
  const std::string name = osdev->name ? osdev->name : "";
  if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
    std::ifstream in("/sys/class/infiniband/" + name + "/ports/1/rate");  // "400 Gb/sec (4X NDR)"
    double gbit = 0;
    return (in >> gbit) ? gbit * 1.25e8 : 0;
  }
  const double mbit = read_number_file("/sys/class/net/" + name + "/speed");
  return mbit > 0 ? mbit * 1.25e5 : 0;
}

Machine read_machine() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    throw base::EnvironmentError("hwloc: cannot initialise a topology");
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> guard(topo, hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    throw base::EnvironmentError(std::string("hwloc: cannot read this machine's topology: ") +
                                 std::strerror(errno));
  }
  Machine m;
  m.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  m.numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  // hwloc sums the NUMA nodes' memory, which misses memory the kernel keeps outside any node
  // (a VM here: 6 GB in node 0 of 25 GB); the kernel's own total is the one processes get.
  m.memory_bytes = std::max(
      static_cast<double>(hwloc_get_root_obj(topo)->total_memory),
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)));
  if (m.cores <= 0 || m.memory_bytes <= 0)
    throw base::EnvironmentError("hwloc: found no cores or no memory");
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
    const auto type = o->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    const hwloc_obj_t pci = o->parent;
    if (pci == nullptr || pci->type != HWLOC_OBJ_PCI_DEVICE) continue;  // not a PCIe NIC
    const double speed = nic_speed(o);
    if (speed <= 0) continue;
    m.nic_bytes_per_s.push_back(speed);
    const double link = pci->attr->pcidev.linkspeed * 1e9;  // hwloc: GB/s
    if (link > 0 && (m.nic_pcie_bytes_per_s == 0 || link < m.nic_pcie_bytes_per_s))
      m.nic_pcie_bytes_per_s = link;
  }
  return m;
}

// One core copying a buffer much larger than the caches: bytes read + written per second, the
// best of 5 copies of 256 MiB (about 0.1 s in all).
double measure_copy_bandwidth() {
  constexpr size_t kBytes = 256u << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), kBytes);
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (b[kBytes / 2] != 1) throw base::InternalError("copy measurement was optimised away");
  return 2.0 * kBytes / best;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw base::EnvironmentError(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::error_code ec;
    if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / tool, ec)) return true;
  }
  return false;
}

std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>/dev/null").c_str(), "r"),
                                             pclose);
  if (!pipe) throw base::EnvironmentError("cannot run " + command);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0;)
    out.append(buf.data(), n);
  return out;
}

pb::LinkSpec link(double bandwidth) {
  pb::LinkSpec l;
  l.set_bandwidth_bytes_per_s(bandwidth);
  return l;
}

void add_nics(const Machine& m, pb::NodeType& node) {
  if (m.nic_bytes_per_s.empty()) return;
  node.mutable_nic()->set_count(static_cast<int64_t>(m.nic_bytes_per_s.size()));
  *node.mutable_nic()->mutable_link() =
      link(*std::min_element(m.nic_bytes_per_s.begin(), m.nic_bytes_per_s.end()));
}

pb::ClusterSpec cpu_cluster(const Machine& m) {
  const CpuInfo cpu = parse_cpuinfo(read_text("/proc/cpuinfo"));
  if (cpu.frequency_hz <= 0) throw base::EnvironmentError("/proc/cpuinfo: no CPU frequency found");
  const double copy = measure_copy_bandwidth();
  pb::ClusterSpec c;
  c.set_name("local");
  pb::DeviceSpec& d = *c.add_devices();
  d.set_name("local-cpu-core");
  d.set_vendor(cpu.vendor);
  d.set_kind(pb::DEVICE_KIND_CPU);
  d.set_architecture(pb::DEVICE_ARCHITECTURE_CPU);
  *d.mutable_peak_flops() = cpu_core_peak(cpu);
  d.set_memory_bytes(m.memory_bytes / static_cast<double>(m.cores));
  d.set_memory_bandwidth_bytes_per_s(copy);
  d.set_description(
      "one core of " + cpu.model_name + " at " + base::units::number(cpu.frequency_hz / 1e9) +
      " GHz: peaks derived as frequency x FMA units x SIMD lanes x 2 from /proc/cpuinfo "
      "flags; memory = the machine's memory / cores; bandwidth measured (one thread "
      "copying 256 MiB, bytes read + written)");
  pb::NodeType& node = *c.add_node_types();
  node.set_name("local");
  node.set_device(d.name());
  node.set_devices_per_node(m.cores);
  node.set_host_memory_bytes(m.memory_bytes);
  node.mutable_intra()->set_kind(pb::INTRA_NODE_KIND_HOST);
  *node.mutable_intra()->mutable_device_link() = link(copy);
  // NICs hang off the host by their PCIe link; with none visible nothing crosses pcie_link and it
  // is set to the measured copy bandwidth so the spec stays complete.
  *node.mutable_intra()->mutable_pcie_link() =
      link(m.nic_pcie_bytes_per_s > 0 ? m.nic_pcie_bytes_per_s : copy);
  add_nics(m, node);
  c.set_description("this machine, discovered: " + std::to_string(m.cores) + " cores in " +
                    std::to_string(m.numa_nodes) + " NUMA nodes, " +
                    base::units::bytes(m.memory_bytes) + " memory, " +
                    std::to_string(m.nic_bytes_per_s.size()) + " NICs of known speed");
  return c;
}

// GPU 0's PCIe link from "<generation>, <lanes>": transfer rate per lane x lanes x encoding.
double gpu_pcie_bandwidth(const std::string& csv) {
  int gen = 0, width = 0;
  if (std::sscanf(csv.c_str(), "%d, %d", &gen, &width) != 2 || gen < 1 || gen > 6 || width <= 0) {
    throw base::EnvironmentError(
        "nvidia-smi: cannot read the GPU's PCIe generation and width from '" + csv + "'");
  }
  constexpr std::array kGigaTransfers{2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  const double encoding = gen <= 2 ? 8.0 / 10 : 128.0 / 130;
  return kGigaTransfers[static_cast<size_t>(gen - 1)] * 1e9 * width * encoding / 8;
}

pb::ClusterSpec gpu_cluster(const Machine& m) {
  const auto gpus = parse_gpu_query(
      run("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"));
  if (gpus.empty()) throw base::EnvironmentError("nvidia-smi is installed but lists no GPU");
  const std::string db = database_gpu_name(gpus[0].name);
  pb::ClusterSpec probe;
  const pb::DeviceSpec* known = db.empty() ? nullptr : lookup_device(probe, db);
  if (known == nullptr) {
    throw base::EnvironmentError("GPU '" + gpus[0].name +
                                 "' is not in orrery's device database; write a cluster "
                                 "file with its DeviceSpec (see topologies/presets/devices/)");
  }
  pb::ClusterSpec c;
  c.set_name("local");
  const auto n = static_cast<int64_t>(gpus.size());
  pb::NodeType& node = *c.add_node_types();
  node.set_name("local");
  node.set_device(known->name());
  node.set_devices_per_node(n);
  node.set_host_memory_bytes(m.memory_bytes);
  pb::IntraNodeSpec& intra = *node.mutable_intra();
  *intra.mutable_pcie_link() =
      link(gpu_pcie_bandwidth(run("nvidia-smi --query-gpu=pcie.link.gen.max,pcie.link.width.max "
                                  "--format=csv,noheader,nounits")));
  const auto matrix = parse_nvlink_matrix(run("nvidia-smi topo -m"));
  const NvlinkStatus nvlink = parse_nvlink_status(run("nvidia-smi nvlink -s -i 0"));
  int least = 1 << 30, most = 0;
  for (size_t i = 0; i < matrix.size(); ++i) {
    for (size_t j = 0; j < matrix[i].size(); ++j) {
      if (i != j) least = std::min(least, matrix[i][j]), most = std::max(most, matrix[i][j]);
    }
  }
  if (n > 1 && least > 0 && nvlink.links > 0) {
    // Behind an NVSwitch, topo -m shows every pair as NVk with k = all of a GPU's links. In a
    // direct mesh a pair has only its own links, at the per-link speed.
    const bool nvswitch = n > 2 && least == most && most == nvlink.links;
    intra.set_kind(nvswitch ? pb::INTRA_NODE_KIND_NVSWITCH : pb::INTRA_NODE_KIND_MESH);
    const double per_link = nvlink.bytes_per_s / nvlink.links;
    *intra.mutable_device_link() = link(nvswitch ? nvlink.bytes_per_s : per_link * least);
  } else {
    intra.set_kind(pb::INTRA_NODE_KIND_PCIE);
  }
  add_nics(m, node);
  c.set_description("this machine, discovered: " + std::to_string(n) + " x " + gpus[0].name +
                    " (nvidia-smi), NVLink from `nvidia-smi topo -m` and `nvlink -s`");
  return c;
}

}  // namespace

pb::ClusterSpec discover_local_machine() {
  const Machine m = read_machine();
  pb::ClusterSpec c = on_path("nvidia-smi") ? gpu_cluster(m) : cpu_cluster(m);
  pb::NodeGroup& g = *c.add_node_groups();
  g.set_name("local");
  g.set_node_type("local");
  g.set_count(1);
  c.mutable_fabric()->set_kind(pb::FABRIC_KIND_NONE);
  return c;
}

}  // namespace orrery::topologies
