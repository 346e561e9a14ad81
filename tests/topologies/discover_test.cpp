// Discovery: this machine as the `local` preset, and the parsers on captured tool output.
#include <gtest/gtest.h>

#include "orrery/topologies/cluster_catalog.hpp"
#include "orrery/topologies/device_db.hpp"
#include "orrery/topologies/discover.hpp"
#include "orrery/topologies/topology.hpp"

namespace orrery::topologies {
namespace {

TEST(TopologiesDiscover, LocalMachineIsOneSoundNode) {
  const pb::ClusterSpec local = preset("local");
  EXPECT_EQ(total_nodes(local), 1);
  EXPECT_GE(total_devices(local), 1);
  const pb::DeviceSpec& d = find_device(local, local.node_types(0).device());
  EXPECT_GT(peak_flops(d, "fp32"), 0);
  EXPECT_GT(d.memory_bandwidth_bytes_per_s(), 0);
  // A CPU core states architecture cpu; a GPU found by nvidia-smi is a preset, which states its.
  EXPECT_NE(d.architecture(), pb::DEVICE_ARCHITECTURE_UNSPECIFIED);
  EXPECT_EQ(d.kind() == pb::DEVICE_KIND_CPU, d.architecture() == pb::DEVICE_ARCHITECTURE_CPU);
  const Topology t(local);
  EXPECT_EQ(check_graph(t), std::vector<std::string>{});
}

TEST(TopologiesDiscover, CpuPeakFromFrequencyFmaUnitsAndLanes) {
  const CpuInfo cpu = parse_cpuinfo(
      "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
      "model name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: 2300.000\n"
      "flags\t\t: fpu sse2 avx fma avx2 avx512f avx512_bf16 avx512_vnni avx512_fp16\n\n"
      "processor\t: 1\n");
  EXPECT_DOUBLE_EQ(cpu.frequency_hz, 2.3e9);
  const pb::PeakFlops p = cpu_core_peak(cpu);
  EXPECT_DOUBLE_EQ(p.fp32(), 2.3e9 * 2 * 16 * 2);  // 147.2 GFLOPS
  EXPECT_DOUBLE_EQ(p.fp64(), 73.6e9);
  EXPECT_DOUBLE_EQ(p.bf16(), 294.4e9);
  EXPECT_DOUBLE_EQ(p.int8(), 588.8e9);
  // The nominal frequency in the model name wins over the momentary "cpu MHz"; AVX2 only: 8 lanes.
  const CpuInfo avx2 = parse_cpuinfo(
      "vendor_id : GenuineIntel\nmodel name : Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
      "cpu MHz : 1000.0\nflags : avx fma avx2\n");
  EXPECT_DOUBLE_EQ(cpu_core_peak(avx2).fp32(), 2.4e9 * 2 * 8 * 2);
}

TEST(TopologiesDiscover, NvidiaSmiParsers) {
  const auto gpus = parse_gpu_query("NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(database_gpu_name(gpus[0].name), "H100-SXM");
  EXPECT_DOUBLE_EQ(gpus[0].memory_bytes, 81559.0 * 1048576);
  EXPECT_EQ(database_gpu_name("NVIDIA A100-SXM4-80GB"), "A100-SXM-80GB");
  EXPECT_EQ(database_gpu_name("NVIDIA H100 PCIe"), "H100-PCIe");
  EXPECT_EQ(database_gpu_name("NVIDIA GB300"), "GB300");  // before GB200 and B200
  EXPECT_EQ(database_gpu_name("Tesla T4"), "");
  const auto m = parse_nvlink_matrix(
      "\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \tNV18\tNV18\tPXB\t0-55\t0\t\tN/A\n"
      "GPU1\tNV18\t X \tNV18\tSYS\t0-55\t0\t\tN/A\n"
      "GPU2\tNV18\tNV18\t X \tSYS\t0-55\t0\t\tN/A\n"
      "NIC0\tPXB\tSYS\tSYS\t X\n\nLegend:\n  X    = Self\n");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], (std::vector<int>{0, 18, 18}));
  const NvlinkStatus s = parse_nvlink_status(
      "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
      "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n\t Link 0: 26.562 GB/s\n");
  EXPECT_EQ(s.links, 2);
  EXPECT_DOUBLE_EQ(s.bytes_per_s, 2 * 26.562e9);
}

}  // namespace
}  // namespace orrery::topologies
