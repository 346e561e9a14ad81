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

#include "process_group.hpp"

namespace orrery::executor::cuda {

// True when libtorch sees a CUDA device for `local_rank` (cuda:local_rank exists).
bool usable(int64_t local_rank);

// Makes cuda:local_rank this process's current device and returns it (one GPU per rank, as
// torchrun and mpirun place them).
c10::Device select_device(int64_t local_rank);

// A NCCL group of `size` ranks rendezvousing through `store` (give each group its own prefixed
// store); `timeout` bounds each collective.
GroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank, int64_t size,
                         std::chrono::milliseconds timeout);

// Timestamps of one step taken on the GPU: CUDA ops are queued, so a host clock around a call
// measures the launch, not the op. mark() records an event on the current stream (no
// synchronization); resolve(), once after the step, waits for the last event and converts every
// mark to seconds since begin_step()'s event. Events are reused from step to step.
class EventClock {
 public:
  EventClock();
  ~EventClock();
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  void begin_step();
  size_t mark();
  std::vector<double> resolve();

 private:
  struct Events;
  std::unique_ptr<Events> events_;
  size_t used_ = 0;
};

}  // namespace orrery::executor::cuda
