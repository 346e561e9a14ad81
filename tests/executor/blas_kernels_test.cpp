// The OpenBLAS kernels orrery chooses for the processes it starts (blas_kernels.hpp): the choice
// follows the CPU's instruction set, the kernels it selects compute GEMMs correctly, and a value
// the user set is passed on untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "orrery/executor/blas_kernels.hpp"
#include "orrery/executor/launcher.hpp"
#include "test_paths.hpp"

namespace orrery::executor {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  return flags;
}

// An environment variable set (or unset) for one scope, restored after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value != nullptr ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// blas_check_main.cpp as rank 0 of a one-rank job: its output, "key=value" lines.
std::string launch_blas_check() {
  LaunchOptions o;
  o.argv = {ORRERY_BLAS_CHECK_BIN};
  o.world_size = 1;
  std::ostringstream out;
  o.out = &out;
  launch_local(o);  // throws when the check exits 1 (an element beyond the error bound)
  return out.str();
}

std::string value_of(const std::string& output, const std::string& key) {
  const auto at = output.find(key + "=");
  if (at == std::string::npos) return "<missing>";
  const auto start = at + key.size() + 1;
  return output.substr(start, output.find('\n', start) - start);
}

TEST(BlasKernels, CoreTypeFollowsTheInstructionSet) {
  EXPECT_EQ(coretype_for_isa(true, true), "SKYLAKEX");
  EXPECT_EQ(coretype_for_isa(false, true), "HASWELL");
  EXPECT_EQ(coretype_for_isa(false, false), "");
}

TEST(BlasKernels, CpuidAgreesWithTheKernelsFlags) {
#if defined(__x86_64__)
  const auto f = cpuinfo_flags();
  const bool avx512 =
      f.count("avx512f") && f.count("avx512bw") && f.count("avx512vl") && f.count("avx512dq");
  EXPECT_EQ(cpu_blas_coretype(), coretype_for_isa(avx512, f.count("avx2") && f.count("fma")));
#else
  EXPECT_EQ(cpu_blas_coretype(), "");
#endif
}

TEST(BlasKernels, LaunchedProcessesGemmCorrectlyWithTheChosenKernels) {
  ScopedEnv unset("OPENBLAS_CORETYPE", nullptr), no_guard(kBlasChosenVariable, nullptr);
  const std::string chosen = blas_coretype_to_set();
  const std::string out = launch_blas_check();
  EXPECT_LE(std::stod(value_of(out, "worst_error_over_bound")), 1.0) << out;
  EXPECT_EQ(value_of(out, "OPENBLAS_CORETYPE"), chosen) << out;
  // This process loaded OpenBLAS without the variable: its own choice, which the child keeps
  // when orrery chose nothing.
  const std::string expected = chosen.empty() ? blas_corename() : chosen;
  EXPECT_EQ(lower(value_of(out, "kernels")), lower(expected)) << out;
}

TEST(BlasKernels, AValueTheUserSetIsLeftUntouched) {
  ScopedEnv user("OPENBLAS_CORETYPE", "Prescott"), no_guard(kBlasChosenVariable, nullptr);
  EXPECT_EQ(blas_coretype_to_set(), "");
  EXPECT_EQ(blas_coretype_note(), "OPENBLAS_CORETYPE=Prescott (set in the environment)");
  reexec_with_blas_kernels();  // returns: nothing to choose (an exec would restart this test)
  const std::string out = launch_blas_check();
  EXPECT_EQ(value_of(out, "OPENBLAS_CORETYPE"), "Prescott") << out;
  if (!blas_corename().empty()) {
    EXPECT_EQ(lower(value_of(out, "kernels")), "prescott") << out;
  }
  EXPECT_LE(std::stod(value_of(out, "worst_error_over_bound")), 1.0) << out;
}

}  // namespace
}  // namespace orrery::executor
