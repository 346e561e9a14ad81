// A process that multiplies fp32 matrices with libtorch's ATen (whatever kernels its OpenBLAS
// loaded) and checks every element against a naive GEMM accumulated in double, within the rounding
// error a k-term fp32 dot product can have. Prints the kernels, OPENBLAS_CORETYPE as it found it
// and the worst error relative to that bound; exits 1 when any element is beyond it. Launched by
// tests/executor/blas_kernels_test.cpp through the executor's launcher.
#include <ATen/ATen.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <tuple>

#include "orrery/executor/blas_kernels.hpp"

namespace {

// max over elements of |c - ref| / (2 k eps sum |a_ik b_kj|): <= 1 for a correct GEMM.
double worst_error(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  const auto A = a.contiguous(), B = b.contiguous(), C = c.contiguous();
  const int64_t m = A.size(0), k = A.size(1), n = B.size(1);
  const float *pa = A.data_ptr<float>(), *pb = B.data_ptr<float>(), *pc = C.data_ptr<float>();
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double term = static_cast<double>(pa[i * k + p]) * pb[p * n + j];
        ref += term;
        magnitude += std::abs(term);
      }
      const double bound = 2.0 * static_cast<double>(k) * FLT_EPSILON * magnitude + FLT_MIN;
      worst = std::max(worst, std::abs(pc[i * n + j] - ref) / bound);
    }
  }
  return worst;
}

}  // namespace

int main() {
  at::manual_seed(7);
  double worst = 0;
  // Odd shapes reach the kernels' edge cases; 256^3 their main loops; b given transposed takes
  // the other GEMM variant (N x T).
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {123, 77, 301}, {256, 256, 256}, {5, 700, 33}};
  for (const auto& [m, n, k] : shapes) {
    const auto a = at::randn({m, k}), b = at::randn({k, n}), bt = at::randn({n, k});
    worst = std::max(worst, worst_error(a, b, at::mm(a, b)));
    worst = std::max(worst, worst_error(a, bt.t(), at::mm(a, bt.t())));
  }
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  std::cout << "kernels=" << orrery::executor::blas_corename() << "\n"
            << "OPENBLAS_CORETYPE=" << (env != nullptr ? env : "") << "\n"
            << "worst_error_over_bound=" << worst << std::endl;
  return worst <= 1.0 ? 0 : 1;
}
