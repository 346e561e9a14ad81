// `orrery bench`: microbenchmarks of this machine with libtorch, the raw material of calibration.
//   compute      fp32 GEMMs over a sweep of shapes (square, tall, and skinny ones that are
//                memory-bound), the attention core softmax(QK^T / sqrt(d)) V and its pieces,
//                memory-bound ops (add, RMSNorm as the executor computes it, LayerNorm, softmax,
//                embedding lookup); on one intra-op thread, since a `local` device is one core.
//   collectives  Gloo all_reduce, all_gather, all_to_all (alltoall_base) and reduce_scatter
//                (alltoall_base + a local sum: Gloo 1.13 has none) over message sizes and group
//                sizes, one thread per rank, each with its own ProcessGroupGloo over loopback
//                TCP, rendezvousing in an in-process store.
// Every op: warm-up calls, then the median of repetitions; ops shorter than min_batch_s are
// timed in batches. Compute ops are timed by the bench thread's CPU time, so other processes on
// a shared machine do not land in them (microbench_timing.hpp); collectives by the wall clock.
// FLOPs and bytes are counted as models/ counts the same ops, so a bench file is a measured trace
// (bench_trace) that `orrery calibrate` reads like an executor trace.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orrery/pb/cluster.pb.h"
#include "orrery/pb/exec_graph.pb.h"

namespace orrery::executor {

struct BenchOptions {
  bool quick = false;         // a few shapes and sizes: seconds, for tests
  int64_t max_ranks = 2;      // collectives run on groups of 2, 4, ... up to this (and it)
  int64_t warmup = 2;         // untimed calls before each measurement
  int64_t repetitions = 7;    // timed repetitions; the median is kept
  double min_batch_s = 2e-3;  // ops shorter than this are timed in batches this long
  double timeout_s = 60;      // a collective waiting longer fails the bench
  // Called with a line of progress before each measurement ("gemm 256x256x256 (3/14)").
  std::function<void(const std::string&)> progress;
};

// One benchmarked compute op.
struct OpMeasurement {
  std::string name;  // unique: "gemm.256x256x256", "add.1048576"
  std::string op;    // as models/ names it: "gemm", "attn.core", "attn.softmax", "add", "rmsnorm"
  pb::OpClass op_class = pb::OP_CLASS_UNSPECIFIED;
  std::vector<int64_t> shape;  // GEMM [m, n, k]; attention [b, h, s, s, d]; others [elements]
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  double seconds = 0;  // median of the repetitions, of the bench thread's CPU time per call
  double start_s = 0;  // when its repetitions began (wall clock), from the start of the bench
};

// One benchmarked collective, as nccl-tests reports it.
struct CollectiveMeasurement {
  std::string name;  // "all_reduce.n2.4194304"
  pb::CollectiveKind collective = pb::COLLECTIVE_KIND_UNSPECIFIED;
  std::string algorithm;  // what Gloo ran: "ring", "direct", "alltoall+sum"
  int64_t ranks = 0;
  double bytes = 0;    // nccl-tests buffer size: all_gather its output, the others their input
  double seconds = 0;  // median over repetitions of the slowest rank's time
  double start_s = 0;
  double algbw() const { return bytes / seconds; }
  double busbw() const;  // algbw x nccl-tests' bus factor
};

struct BenchResults {
  std::vector<OpMeasurement> compute;  // GEMMs, attention, memory-bound ops, in that order
  std::vector<CollectiveMeasurement> collectives;
};

// nccl-tests' bus-bandwidth factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all
// (n-1)/n; others 1 (the simulator's collective cost model uses the same).
double bus_factor(pb::CollectiveKind kind, int64_t ranks);

// The BLAS the GEMMs run on: "OpenBLAS 0.3.21 DYNAMIC_ARCH ..., kernels for Prescott". OpenBLAS
// picks kernels by CPU model and falls back to generic ones on CPUs it does not know, which
// decides GEMM speed several times over (OPENBLAS_CORETYPE overrides it).
std::string blas_description();

// Throws EnvironmentError when libtorch or Gloo fails (a collective timing out included).
std::vector<OpMeasurement> bench_compute(const BenchOptions& options);
std::vector<CollectiveMeasurement> bench_collectives(const BenchOptions& options);

// The results as a measured trace (producer "orrery bench (<blas>)"): rank 0 holds a compute node
// per op (stream "compute") and a collective node per collective (stream "comm", process group
// "bench" of its size), ranks 1.. only say their device. `cluster` (this machine, as `orrery topo
// show local` describes it) is carried so calibration knows the device's peak and bandwidth;
// `device` names its DeviceSpec.
pb::ExecGraph bench_trace(const BenchResults& results, const pb::ClusterSpec& cluster,
                          const std::string& device, const std::string& blas);

}  // namespace orrery::executor
