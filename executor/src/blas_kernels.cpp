#include "orrery/executor/blas_kernels.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "orrery/base/error.hpp"

namespace orrery::executor {
namespace {

constexpr const char* kCoretypeVariable = "OPENBLAS_CORETYPE";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string openblas_text(const char* symbol) {
  using Text = char* (*)();
  const auto f = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, symbol));
  return f == nullptr ? std::string() : std::string(f());
}

// OpenBLAS's own choice already uses the chosen instruction set (or a newer one of the same
// family): leave it, a real Cooper Lake keeps its Cooper Lake kernels.
bool runs_at_least(const std::string& corename, const std::string& coretype) {
  const std::string c = lower(corename);
  const bool avx512 = c == "skylakex" || c == "cooperlake" || c == "sapphirerapids";
  if (coretype == "SKYLAKEX") return avx512;
  if (coretype == "HASWELL") return avx512 || c == "haswell" || c == "zen";
  return true;
}

#if defined(__x86_64__) || defined(__i386__)
// The register state the OS saves on a context switch (XCR0): without it the instructions fault.
uint64_t saved_register_state() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

}  // namespace

std::string coretype_for_isa(bool avx512_f_bw_vl_dq, bool avx2_fma) {
  if (avx512_f_bw_vl_dq) return "SKYLAKEX";
  if (avx2_fma) return "HASWELL";
  return "";
}

std::string cpu_blas_coretype() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return "";
  const bool fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  if (!osxsave || !avx) return "";
  const uint64_t xcr0 = saved_register_state();
  const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return "";
  const bool avx2 = (b >> 5) & 1;
  const bool avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
  return coretype_for_isa(avx512 && zmm, avx2 && fma && ymm);
#else
  return "";
#endif
}

std::string blas_corename() { return openblas_text("openblas_get_corename"); }

std::string blas_config() { return openblas_text("openblas_get_config"); }

std::string blas_coretype_to_set() {
  if (std::getenv(kCoretypeVariable) != nullptr) return "";
  // Without DYNAMIC_ARCH the kernels are compiled in and the variable is ignored.
  if (blas_config().find("DYNAMIC_ARCH") == std::string::npos) return "";
  const std::string coretype = cpu_blas_coretype();
  if (coretype.empty() || runs_at_least(blas_corename(), coretype)) return "";
  return coretype;
}

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  std::string item;
  while (std::getline(in, item, '\0')) argv.push_back(item);
  if (argv.empty())
    throw base::EnvironmentError("cannot read /proc/self/cmdline to re-run this command");
  argv[0] = "/proc/self/exe";
  return argv;
}

void reexec_with_blas_kernels() {
  // The guard: set by an earlier exec of this process or by orrery's launcher, so never twice.
  if (std::getenv(kBlasChosenVariable) != nullptr) return;
  const std::string coretype = blas_coretype_to_set();
  if (coretype.empty()) return;
  std::vector<std::string> args;
  try {
    args = own_command_line();
  } catch (const base::EnvironmentError& e) {
    std::cerr << "orrery: " << e.what() << "; GEMMs run on OpenBLAS's " << blas_corename()
              << " kernels\n";
    return;
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::setenv(kCoretypeVariable, coretype.c_str(), 0);
  ::setenv(kBlasChosenVariable, coretype.c_str(), 1);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::execv(argv[0], argv.data());
  // Only reached when the exec failed: carry on with OpenBLAS's own kernels, and say so.
  std::cerr << "orrery: cannot re-execute with OPENBLAS_CORETYPE=" << coretype << " ("
            << std::strerror(errno) << "); GEMMs run on OpenBLAS's " << blas_corename()
            << " kernels\n";
  ::unsetenv(kCoretypeVariable);
  ::unsetenv(kBlasChosenVariable);
}

std::string blas_coretype_note() {
  const char* value = std::getenv(kCoretypeVariable);
  if (value == nullptr) return std::string(kCoretypeVariable) + " unset (OpenBLAS's own choice)";
  const char* chosen = std::getenv(kBlasChosenVariable);
  const bool ours = chosen != nullptr && std::strcmp(chosen, value) == 0;
  return std::string(kCoretypeVariable) + "=" + value +
         (ours ? " (chosen by orrery for this CPU)" : " (set in the environment)");
}

}  // namespace orrery::executor
