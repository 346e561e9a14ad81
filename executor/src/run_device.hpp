// The device a rank trains on, chosen once per rank before anything is built: cuda:LOCAL_RANK
// with NCCL groups, or the CPU with Gloo groups. The rule (docs/executor.md, "On a GPU"): a
// cluster of CPU devices runs on the CPU even where CUDA is usable (the simulator predicts cores);
// a cluster of GPUs needs cuda:LOCAL_RANK and fails, naming why, when it is not usable, rather
// than train on the CPU behind the user's back; and "this machine" (nothing said) is its GPUs
// when libtorch sees any, as `orrery topo discover` describes `local`, else its cores. Every rank
// of a job applies the same rule, so they agree on the process-group backend.
//
// The rule itself is torch-free (choose_run_device), so it is tested without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "orrery/pb/cluster.pb.h"

namespace orrery::executor {

class StepClock;  // op_trace.hpp

enum class DeviceRequest {
  kThisMachine,  // CUDA when this build has it and libtorch sees a device, else the CPU
  kCpu,
  kGpu,  // a CUDA device or an error
};

// The request of a cluster whose devices are `kind` (cluster.proto): CPU, GPU, or unspecified
// (this machine).
DeviceRequest device_request(pb::DeviceKind kind);

// What this process can use: whether the executor was built with CUDA (ORRERY_EXECUTOR_CUDA, a
// CUDA libtorch) and how many devices libtorch sees.
struct CudaAvailability {
  bool built = false;
  int64_t devices = 0;
};
CudaAvailability cuda_availability();

struct RunDevice {
  bool cuda = false;
  int64_t index = -1;  // cuda:index
  std::string str() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

// The rule above, for the rank with `local_rank` (its index on its host, one GPU each). Throws
// EnvironmentError, naming the reason, when a GPU is needed and cuda:local_rank cannot be had.
RunDevice choose_run_device(DeviceRequest request, int64_t local_rank,
                            const CudaAvailability& cuda);

// choose_run_device with this process's availability; a CUDA device is made current.
RunDevice select_run_device(DeviceRequest request, int64_t local_rank);

// OpTrace's clock for `device`: the host's steady clock on the CPU, CUDA events on a GPU
// (op_trace.hpp says why).
std::unique_ptr<StepClock> make_step_clock(const RunDevice& device);

}  // namespace orrery::executor
