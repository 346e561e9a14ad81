// Telling a PyTorch profiler (Kineto) trace from an orrery file without holding the file
// (traces/src/kineto.cpp): a measured trace need not be read whole to know how to read it.
#pragma once

#include <filesystem>

namespace orrery {

// is_kineto_trace (orrery/traces/kineto.hpp) for a file, read in pieces of 1 MiB.
bool is_kineto_trace_file(const std::filesystem::path& file);

}  // namespace orrery
