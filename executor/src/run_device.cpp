#include "run_device.hpp"

#include "op_trace.hpp"
#include "orrery/base/error.hpp"

#ifdef ORRERY_EXECUTOR_CUDA
#include "cuda_runtime.hpp"
#endif

namespace orrery::executor {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Why a rank that must run on a GPU cannot, or empty when cuda:local_rank is there.
std::string gpu_problem(int64_t local_rank, const CudaAvailability& cuda) {
  if (!cuda.built) {
    return "this orrery's executor was built against a libtorch without CUDA; build it against a "
           "CUDA "
           "libtorch (docs/executor.md, \"On a GPU\")";
  }
  if (cuda.devices == 0)
    return "libtorch sees no CUDA device (no driver, or CUDA_VISIBLE_DEVICES hides them)";
  if (local_rank < 0 || local_rank >= cuda.devices) {
    return "LOCAL_RANK " + str(local_rank) + " needs cuda:" + str(local_rank) +
           " but libtorch sees " + str(cuda.devices) +
           " CUDA device(s): start at most one rank per GPU on each host";
  }
  return "";
}

}  // namespace

DeviceRequest device_request(pb::DeviceKind kind) {
  switch (kind) {
    case pb::DEVICE_KIND_GPU:
      return DeviceRequest::kGpu;
    case pb::DEVICE_KIND_CPU:
      return DeviceRequest::kCpu;
    default:
      return DeviceRequest::kThisMachine;
  }
}

CudaAvailability cuda_availability() {
#ifdef ORRERY_EXECUTOR_CUDA
  return {true, cuda::device_count()};
#else
  return {};
#endif
}

RunDevice choose_run_device(DeviceRequest request, int64_t local_rank,
                            const CudaAvailability& cuda) {
  if (request == DeviceRequest::kCpu) return {};
  // This machine is its GPUs when it has any: then every rank takes one (a rank left on the CPU
  // would build Gloo groups its peers build with NCCL, and the job would hang).
  if (request == DeviceRequest::kThisMachine && (!cuda.built || cuda.devices == 0)) return {};
  if (const auto why = gpu_problem(local_rank, cuda); !why.empty()) {
    throw base::EnvironmentError(request == DeviceRequest::kGpu
                                     ? "the cluster's devices are GPUs, but " + why
                                     : "this machine has CUDA devices, but " + why);
  }
  return {true, local_rank};
}

RunDevice select_run_device(DeviceRequest request, int64_t local_rank) {
  const RunDevice device = choose_run_device(request, local_rank, cuda_availability());
#ifdef ORRERY_EXECUTOR_CUDA
  if (device.cuda) cuda::select_device(device.index);
#endif
  return device;
}

std::unique_ptr<StepClock> make_step_clock(const RunDevice& device) {
#ifdef ORRERY_EXECUTOR_CUDA
  if (device.cuda) return std::make_unique<cuda::EventClock>();
#endif
  ORRERY_CHECK(!device.cuda, "a CUDA device in an executor built without CUDA");
  return std::make_unique<HostClock>();
}

}  // namespace orrery::executor
