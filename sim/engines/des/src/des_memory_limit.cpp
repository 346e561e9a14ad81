// limit_memory (des_internal.hpp): the engine process's backstop behind the des budget. The
// estimate (des_estimate.cpp) refuses runs before orrery-des starts; this catches a misestimate.
// The engine process's address space may grow by the budget's memory
// (DesOptions::memory_limit_bytes) past what it holds once it has read its job; an allocation
// beyond that fails, and the new-handler writes 'B' <reason> as its reply and exits, instead of the
// run growing until the kernel's OOM killer or a failed allocation deep in SimGrid ends it with a
// signal. The message is written before the limit is set: the handler must not allocate.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <new>

#include "des_internal.hpp"

namespace orrery::sim::des {
namespace {

int result_fd = -1;
char message[400];
size_t message_size = 0;

[[noreturn]] void out_of_memory() {
  size_t done = 0;
  while (done < message_size) {
    const ssize_t n = ::write(result_fd, message + done, message_size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::_exit(0);
}

// The process's current address space (VmSize), from /proc/self/statm.
double address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  statm >> pages;
  return pages * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  return false;
}

}  // namespace

double memory_limit_bytes(const DesOptions& options) {
  if (sanitized()) return 0;
  if (options.memory_limit_bytes > 0) return options.memory_limit_bytes;
  if (options.max_nodes <= 0) return 0;
  return std::max(kDesMemoryFloor,
                  kDesMemoryHeadroom * static_cast<double>(options.max_nodes) * kDesBytesPerNode);
}

void limit_memory(const DesOptions& options, int fd) {
  const double extra = memory_limit_bytes(options);
  if (extra <= 0) return;
  const double gib = 1024.0 * 1024 * 1024;
  const int n = std::snprintf(
      message, sizeof message,
      "Bthe des engine ran out of its memory limit of %.2f GiB (RLIMIT_AS, set from the des "
      "budget of %lld nodes at %.0f bytes each, x%.0f): the estimate was too low for this run",
      extra / gib, static_cast<long long>(options.max_nodes), kDesBytesPerNode, kDesMemoryHeadroom);
  message_size = n > 0 ? std::min(static_cast<size_t>(n), sizeof message - 1) : 0;
  result_fd = fd;
  const auto limit = static_cast<rlim_t>(address_space_bytes() + extra);
  const rlimit r{limit, limit};
  if (::setrlimit(RLIMIT_AS, &r) != 0) return;  // no limit is what the run had before
  std::set_new_handler(out_of_memory);
}

}  // namespace orrery::sim::des
