// The executor's CUDA pieces, built only with a CUDA-enabled libtorch (ORRERY_EXECUTOR_CUDA) and
// compile-checked elsewhere (ORRERY_EXECUTOR_CUDA_COMPILE_CHECK, see executor/CMakeLists.txt):
// the rank's device (cuda:LOCAL_RANK), NCCL process groups, and op timing with CUDA events.
// This header needs only libtorch's; the CUDA runtime and NCCL headers stay in cuda_runtime.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <c10/core/Device.h>

#include "op_trace.hpp"
#include "process_group.hpp"

namespace orrery::executor::cuda {

// CUDA devices libtorch sees (0 without a driver, or with CUDA_VISIBLE_DEVICES empty).
int64_t device_count();

// True when libtorch sees a CUDA device for `local_rank` (cuda:local_rank exists).
bool usable(int64_t local_rank);

// Makes cuda:local_rank this process's current device and returns it (one GPU per rank, as
// torchrun and mpirun place them).
c10::Device select_device(int64_t local_rank);

// A NCCL group of `size` ranks rendezvousing through `store` (give each group its own prefixed
// store); `timeout` bounds each collective. Its communicators are created at its first
// collective, on the current device (select_device first).
GroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                         std::chrono::milliseconds timeout);

// Timestamps of one step taken on the GPU, OpTrace's clock there (op_trace.hpp): CUDA ops are
// queued, so a host clock around a call measures the launch, not the op. mark() records an event
// on the calling thread's current stream (no synchronization); resolve(), once after the step,
// waits for the events and converts every mark to seconds since begin_step()'s event. Events are
// reused from step to step.
class EventClock final : public StepClock {
 public:
  EventClock();
  ~EventClock() override;
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  void begin_step() override;
  size_t mark() override;
  void resolve() override;
  double since_origin(size_t i) const override { return seconds_[i]; }
  double between(size_t a, size_t b) const override { return seconds_[b] - seconds_[a]; }

 private:
  struct Events;
  std::unique_ptr<Events> events_;
  size_t used_ = 0;
  std::vector<double> seconds_;  // per mark, after resolve()
};

}  // namespace orrery::executor::cuda
