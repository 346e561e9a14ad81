// Which BLAS libtorch's GEMMs ran on, for the bench's header and the trace's producer. Debian's
// libtorch calls the system BLAS (OpenBLAS through libblas.so.3); OpenBLAS picks its kernels by
// CPU model at load time and falls back to generic ones on a CPU it does not know (0.3.21 on a
// virtual "Intel Xeon Processor" with AVX-512 picks Prescott, SSE3), which decides GEMM speed
// several times over. OPENBLAS_CORETYPE overrides its choice.
#include <dlfcn.h>

#include <string>

#include "orrery/executor/microbench.hpp"

namespace orrery::executor {

std::string blas_description() {
  using Text = char* (*)();
  const auto corename = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const auto config = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (corename == nullptr || config == nullptr)
    return "not OpenBLAS (no openblas_get_corename in the process)";
  return std::string(config()) + ", kernels for " + corename();
}

}  // namespace orrery::executor
