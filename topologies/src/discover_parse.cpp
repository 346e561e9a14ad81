// Parsers for /proc/cpuinfo and nvidia-smi output, and the CPU peak derivation.
#include <charconv>
#include <cmath>
#include <regex>
#include <sstream>

#include "orrery/topologies/discover.hpp"

namespace orrery::topologies {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

double to_double(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

CpuInfo parse_cpuinfo(std::string_view text) {
  CpuInfo cpu;
  double mhz = 0;
  for (const std::string& line : lines_of(text)) {
    if (trim(line).empty()) break;  // end of the first processor
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(std::string_view(line).substr(0, colon));
    const std::string value = trim(std::string_view(line).substr(colon + 1));
    if (key == "vendor_id") cpu.vendor = value;
    if (key == "model name") cpu.model_name = value;
    if (key == "cpu family") cpu.family = static_cast<int>(to_double(value));
    if (key == "cpu MHz") mhz = to_double(value);
    if (key == "flags") {
      std::istringstream words(value);
      for (std::string w; words >> w;) cpu.flags.insert(w);
    }
  }
  static const std::regex kNominal(R"(@\s*([0-9.]+)\s*GHz)");
  std::smatch m;
  if (std::regex_search(cpu.model_name, m, kNominal)) {
    cpu.frequency_hz = to_double(m[1]) * 1e9;
  } else {
    cpu.frequency_hz = mhz * 1e6;
  }
  return cpu;
}

pb::PeakFlops cpu_core_peak(const CpuInfo& cpu) {
  auto has = [&](const char* f) { return cpu.flags.contains(f); };
  const bool amd_half_width = cpu.vendor == "AuthenticAMD" && cpu.family < 26;  // before Zen 5
  double lanes = 4;
  if (has("avx") || has("avx2")) lanes = 8;
  if (has("avx512f")) lanes = amd_half_width ? 8 : 16;
  const double units = has("fma") || has("avx512f") ? 2 : 1;
  const double per_cycle_fp32 = units * lanes * 2;
  pb::PeakFlops p;
  p.set_fp32(cpu.frequency_hz * per_cycle_fp32);
  p.set_fp64(p.fp32() / 2);
  if (has("amx_bf16")) {
    p.set_bf16(cpu.frequency_hz * 1024);
  } else if (has("avx512_bf16")) {
    p.set_bf16(p.fp32() * 2);
  }
  if (has("avx512_fp16")) p.set_fp16(p.fp32() * 2);
  if (has("avx512_vnni")) p.set_int8(p.fp32() * 4);
  return p;
}

std::vector<GpuRecord> parse_gpu_query(std::string_view csv) {
  std::vector<GpuRecord> out;
  for (const std::string& line : lines_of(csv)) {
    const auto comma = line.rfind(',');
    if (comma == std::string::npos) continue;
    // memory.total with nounits is MiB.
    out.push_back({trim(std::string_view(line).substr(0, comma)),
                   to_double(trim(std::string_view(line).substr(comma + 1))) * 1048576.0});
  }
  return out;
}

std::string database_gpu_name(std::string_view name) {
  const std::string n(name);
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("GB300")) return "GB300";
  if (has("GB200")) return "GB200";
  if (has("B200")) return "B200";
  if (has("H200")) return "H200-SXM";
  if (has("H800")) return "H800-SXM";
  if (has("H100") && (has("PCIe") || has("NVL"))) return "H100-PCIe";
  if (has("H100")) return "H100-SXM";
  if (has("A800")) return "A800-SXM-80GB";
  if (has("A100") && has("80GB")) return "A100-SXM-80GB";
  if (has("A100")) return "A100-SXM-40GB";
  if (has("L40S")) return "L40S";
  return "";
}

std::vector<std::vector<int>> parse_nvlink_matrix(std::string_view topo) {
  std::vector<std::string> header;
  std::vector<std::vector<int>> matrix;
  static const std::regex kGpu(R"(^GPU\d+$)");
  for (const std::string& line : lines_of(topo)) {
    std::istringstream in(line);
    std::vector<std::string> cells;
    for (std::string w; in >> w;) cells.push_back(w);
    if (cells.empty()) continue;
    if (header.empty()) {
      if (std::regex_match(cells[0], kGpu)) header = cells;
      continue;
    }
    if (!std::regex_match(cells[0], kGpu)) continue;
    std::vector<int> row;
    for (size_t j = 0; j < header.size() && j + 1 < cells.size(); ++j) {
      if (!std::regex_match(header[j], kGpu)) break;
      const std::string& c = cells[j + 1];
      row.push_back(c.rfind("NV", 0) == 0 ? static_cast<int>(to_double(c.substr(2))) : 0);
    }
    matrix.push_back(row);
  }
  return matrix;
}

NvlinkStatus parse_nvlink_status(std::string_view status) {
  static const std::regex kLink(R"(Link\s+\d+:\s*([0-9.]+)\s*GB/s)");
  NvlinkStatus total;
  bool in_gpu0 = false;
  for (const std::string& line : lines_of(status)) {
    if (line.rfind("GPU ", 0) == 0) in_gpu0 = line.rfind("GPU 0:", 0) == 0;
    std::smatch m;
    if (in_gpu0 && std::regex_search(line, m, kLink)) {
      ++total.links;
      total.bytes_per_s += to_double(m[1]) * 1e9;
    }
  }
  return total;
}

}  // namespace orrery::topologies
