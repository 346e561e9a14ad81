// Which BLAS libtorch's GEMMs ran on, for the bench's header and the trace's producer. Debian's
// libtorch calls the system BLAS (OpenBLAS through libblas.so.3); OpenBLAS picks its kernels by
// CPU model at load time and falls back to generic ones on a CPU it does not know (0.3.21 on a
// virtual "Intel Xeon Processor" with AVX-512 picks Prescott, SSE3), which decides GEMM speed
// several times over. OPENBLAS_CORETYPE overrides its choice (blas_kernels.hpp).
#include <string>

#include "orrery/executor/blas_kernels.hpp"
#include "orrery/executor/microbench.hpp"

namespace orrery::executor {

std::string blas_description() {
  const std::string corename = blas_corename(), config = blas_config();
  if (corename.empty() || config.empty())
    return "not OpenBLAS (no openblas_get_corename in the process)";
  return config + ", kernels for " + corename + "; " + blas_coretype_note();
}

}  // namespace orrery::executor
