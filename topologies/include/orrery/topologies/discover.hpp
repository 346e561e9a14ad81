// `orrery topo discover`: this machine as a ClusterSpec (one node), from hwloc (cores, NUMA
// nodes, memory, PCIe NICs) and, when an NVIDIA GPU is present, nvidia-smi (GPU type, count,
// memory, NVLink topology). Without a GPU the devices are the CPU cores (the `local` preset).
// The text parsers are public so that tests can feed them captured tool output.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "orrery/pb/cluster.pb.h"

namespace orrery::topologies {

// Throws EnvironmentError when hwloc cannot read the machine or a tool's output is unusable.
pb::ClusterSpec discover_local_machine();

// The first processor of /proc/cpuinfo.
struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string model_name;
  int family = 0;
  double frequency_hz = 0;  // nominal: "@ 2.30GHz" in the model name, else "cpu MHz"
  std::set<std::string> flags;
};
CpuInfo parse_cpuinfo(std::string_view text);

// Peak dense FLOP/s of one core, derived (not measured) as frequency x FMA units x SIMD lanes x 2:
//   fp32 lanes: 16 with a 512-bit datapath (AVX-512; AMD before Zen 5 runs it on 256-bit units,
//   so 8), 8 with AVX2/AVX, 4 with SSE; 2 FMA units (1 without the fma flag, whose separate
//   multiply and add still make 2 FLOP per lane); fp64 is half of fp32; bf16 and fp16 twice fp32
//   with avx512_bf16 / avx512_fp16, and 1,024 FLOP per cycle with AMX (amx_bf16); int8 4x fp32
//   with AVX-512 VNNI.
pb::PeakFlops cpu_core_peak(const CpuInfo& cpu);

// `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` lines.
struct GpuRecord {
  std::string name;
  double memory_bytes = 0;
};
std::vector<GpuRecord> parse_gpu_query(std::string_view csv);

// The device database name for an nvidia-smi product name ("NVIDIA H100 80GB HBM3" ->
// "H100-SXM"); empty when unknown.
std::string database_gpu_name(std::string_view nvidia_smi_name);

// `nvidia-smi topo -m`: the NVLink count between GPU i and j (the k of "NVk"), 0 otherwise.
std::vector<std::vector<int>> parse_nvlink_matrix(std::string_view topo);

// `nvidia-smi nvlink -s -i 0`: GPU 0's active links ("Link 3: 26.562 GB/s") and the sum of their
// speeds, bytes/s per direction.
struct NvlinkStatus {
  int links = 0;
  double bytes_per_s = 0;
};
NvlinkStatus parse_nvlink_status(std::string_view status);

}  // namespace orrery::topologies
