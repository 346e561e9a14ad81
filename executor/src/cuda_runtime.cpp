#include "cuda_runtime.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cuda_runtime_api.h>

#include "orrery/base/error.hpp"

namespace orrery::executor::cuda {

int64_t device_count() { return static_cast<int64_t>(c10::cuda::device_count()); }

bool usable(int64_t local_rank) {
  return local_rank >= 0 && static_cast<int64_t>(c10::cuda::device_count()) > local_rank;
}

c10::Device select_device(int64_t local_rank) {
  if (!usable(local_rank)) {
    throw base::EnvironmentError(
        "LOCAL_RANK " + std::to_string(local_rank) + " needs cuda:" + std::to_string(local_rank) +
        " but libtorch sees " + std::to_string(c10::cuda::device_count()) + " CUDA device(s)");
  }
  const auto index = static_cast<c10::DeviceIndex>(local_rank);
  try {
    c10::cuda::set_device(index);
  } catch (const c10::Error& e) {  // a device libtorch counts but cannot use (busy, wrong driver)
    throw base::EnvironmentError("cannot use cuda:" + std::to_string(local_rank) + ": " +
                                 e.what_without_backtrace());
  }
  return {c10::DeviceType::CUDA, index};
}

GroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                         std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  // 1.13: ProcessGroupNCCL is a ProcessGroup; 2.x: a Backend, which GroupPtr then holds
  // (process_group.hpp). The constructor is the same.
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank),
                                                     static_cast<int>(size), options);
}

// Timing events (the default CUDAEvent disables timing), in the order marked.
struct EventClock::Events {
  at::cuda::CUDAEvent origin{cudaEventDefault};
  std::vector<at::cuda::CUDAEvent> marks;
};

EventClock::EventClock() : events_(std::make_unique<Events>()) {}
EventClock::~EventClock() = default;

void EventClock::begin_step() {
  used_ = 0;
  seconds_.clear();
  events_->origin.record(c10::cuda::getCurrentCUDAStream());
}

size_t EventClock::mark() {
  if (used_ == events_->marks.size()) events_->marks.emplace_back(cudaEventDefault);
  events_->marks[used_].record(c10::cuda::getCurrentCUDAStream());
  return used_++;
}

void EventClock::resolve() {
  seconds_.assign(used_, 0.0);
  // Events on one stream complete in order, so this is one wait in practice; marks recorded on
  // other streams (autograd's device thread uses the forward's stream, the default one) are each
  // waited for all the same.
  for (size_t i = 0; i < used_; ++i) events_->marks[i].synchronize();
  for (size_t i = 0; i < used_; ++i)
    seconds_[i] = events_->origin.elapsed_time(events_->marks[i]) / 1e3;
}

}  // namespace orrery::executor::cuda
