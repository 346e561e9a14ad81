// Freed memory stays in the process's heap while one of these lives: glibc then serves every
// allocation, large ones included, from memory it already has, as PyTorch's CUDA caching
// allocator does on a GPU. Without it, glibc maps each large tensor afresh (mmap above a dynamic
// threshold) and returns it on free, so every large result pays page faults on first touch: on
// this machine's cores as long as a copy of the same bytes (64 MiB), and 10-15% of an FSDP step.
// The simulator charges an op its FLOPs and bytes, not the allocator's page faults, so both
// `orrery bench` and a CPU rank of `orrery run` keep freed memory; the cost is that the heap does
// not shrink below its peak until the scope ends.
#pragma once

#include <malloc.h>

namespace orrery::executor::detail {

class KeepFreedMemory {
 public:
  KeepFreedMemory() {
    mallopt(M_MMAP_MAX, 0);         // no fresh mappings: large blocks come from the heap
    mallopt(M_TRIM_THRESHOLD, -1);  // never return the heap's top to the system
  }
  ~KeepFreedMemory() {
    mallopt(M_MMAP_MAX, 65536);  // glibc's defaults
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  }
  KeepFreedMemory(const KeepFreedMemory&) = delete;
  KeepFreedMemory& operator=(const KeepFreedMemory&) = delete;
};

}  // namespace orrery::executor::detail
