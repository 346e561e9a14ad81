// Before `orrery run` starts local ranks on CPU devices: the memory model's estimate of what they
// will hold together, against what this host has available. A plan that would exhaust the host is
// refused up front, naming the estimate, the limit and how to raise it, instead of swapping the
// machine to a halt or dying in an allocation at step 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plan_args.hpp"

namespace orrery::cli {

// Host memory the ranks may use: `--host-memory` when given (a size, "64 GiB"), else MemAvailable
// from /proc/meminfo. Throws InputError naming the flag when the text is not a size.
double host_memory_limit(const std::optional<std::string>& flag);

// The memory model's peak per pipeline stage (sim::memory_per_stage), summed over every rank this
// job starts here.
double local_ranks_peak_bytes(const LoadedJob& job);

// Throws InputError ("plan") when the local ranks need more than `limit` bytes. For jobs on CPU
// devices only (the caller knows the kind): GPU jobs hold their model in device memory.
void check_host_memory(const LoadedJob& job, double limit);

}  // namespace orrery::cli
