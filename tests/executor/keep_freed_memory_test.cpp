// KeepFreedMemory (executor/src/keep_freed_memory.hpp), which `orrery bench` and a CPU rank of
// `orrery run` hold: while it lives, a large block comes from the heap glibc already has rather
// than from a fresh mapping (whose page faults the simulator does not model); after it, glibc's
// defaults are back.
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "keep_freed_memory.hpp"

namespace orrery::executor {
namespace {

// How many mapped blocks a 64 MiB allocation adds while it is held: glibc maps any block above
// its mmap threshold, which grows to at most 32 MiB on its own.
size_t mappings_for_64_mib() {
  const size_t before = mallinfo2().hblks;
  void* p = std::malloc(size_t{64} << 20);
  EXPECT_NE(p, nullptr);
  std::memset(p, 1, 4096);
  const size_t during = mallinfo2().hblks;
  std::free(p);
  return during - before;
}

TEST(KeepFreedMemory, LargeBlocksComeFromTheHeapWhileItLives) {
  EXPECT_EQ(mappings_for_64_mib(), 1u);
  {
    detail::KeepFreedMemory keep;
    EXPECT_EQ(mappings_for_64_mib(), 0u);
    EXPECT_EQ(mappings_for_64_mib(), 0u);
  }
  // The heap still holds the block it kept (nothing is trimmed until memory is freed or
  // malloc_trim asks); once it is returned, large blocks are mapped again.
  malloc_trim(0);
  EXPECT_EQ(mappings_for_64_mib(), 1u);
}

}  // namespace
}  // namespace orrery::executor
