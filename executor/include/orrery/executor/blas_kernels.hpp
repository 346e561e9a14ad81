// Which OpenBLAS kernels orrery's processes run on. Debian's OpenBLAS (DYNAMIC_ARCH) picks its
// kernels by CPU model when it loads and falls back to generic ones on a CPU it does not know
// (0.3.21 runs its SSE3 Prescott kernels on a virtual AVX-512 "Intel Xeon Processor": a fifth of
// the core's GEMM peak). OPENBLAS_CORETYPE, read once when the library initialises, overrides
// that choice; so orrery chooses by the CPU's instruction set (cpuid) and sets it for the
// processes it starts, and re-executes a single-process command once to get it itself. A value
// the user set is never replaced (some machines set one on purpose).
#pragma once

#include <string>
#include <vector>

namespace orrery::executor {

// Set, with the same value, next to OPENBLAS_CORETYPE when orrery chose it: the re-exec guard,
// and how `bench` tells orrery's choice from the user's.
inline constexpr const char* kBlasChosenVariable = "ORRERY_BLAS_CORETYPE_CHOSEN";

// The OpenBLAS core type for an instruction set: "SKYLAKEX" with AVX-512 F, BW, VL and DQ,
// "HASWELL" with AVX2 and FMA, "" (no choice) otherwise.
std::string coretype_for_isa(bool avx512_f_bw_vl_dq, bool avx2_fma);

// coretype_for_isa() of this CPU, by cpuid (and xgetbv: the OS must save the vector registers);
// "" on other architectures.
std::string cpu_blas_coretype();

// The kernels the OpenBLAS in this process runs (openblas_get_corename), and how it was built
// (openblas_get_config); "" without OpenBLAS.
std::string blas_corename();
std::string blas_config();

// The OPENBLAS_CORETYPE orrery gives a process it starts: cpu_blas_coretype(), or "" when the
// variable is set already, the process has no OpenBLAS built with DYNAMIC_ARCH, or OpenBLAS's
// own choice already runs that instruction set.
std::string blas_coretype_to_set();

// Re-executes this process (/proc/self/exe, the same arguments) with blas_coretype_to_set() in
// its environment; returns without doing anything when there is nothing to set or this process
// is already the re-executed one. Call before any work whose output must not repeat.
void reexec_with_blas_kernels();

// This process's own command line, argv[0] replaced by /proc/self/exe.
std::vector<std::string> own_command_line();

// "OPENBLAS_CORETYPE=SKYLAKEX (chosen by orrery for this CPU)", "... (set in the environment)"
// or "OPENBLAS_CORETYPE unset (OpenBLAS's own choice)".
std::string blas_coretype_note();

}  // namespace orrery::executor
