// Measured traces as `validate --trace` and `calibrate` read them: an orrery trace (the ExecGraph
// of `orrery run --out` or `orrery bench --out`) or a PyTorch profiler (Kineto) trace, checked
// against the host's memory before it is read. Orrery traces in JSON are read as a stream
// (read_json_file_streaming): the trace is held once, as its message; a Kineto trace is held as
// text and as a JSON tree while it is imported.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "orrery/pb/exec_graph.pb.h"

namespace orrery::cli {

// Bytes of memory per byte of file while a trace is read and used, measured on a 175 MB trace
// of `orrery_trace_gen` (docs/benchmarks.md, "Large traces"), with room.
inline constexpr double kStreamedTraceBytesPerFileByte = 4.0;
inline constexpr double kKinetoTraceBytesPerFileByte = 12.0;

// Refuses (InputError naming `flag`'s field "--traces"/"--trace" and --host-memory) when reading
// `files` one after another would need more than `limit` bytes (host_memory_limit); 0: no limit.
void check_trace_memory(const std::vector<std::string>& files, const std::string& flag,
                        double limit);

// An orrery trace: JSON streamed, YAML through the spec reader.
pb::ExecGraph read_orrery_trace(const std::string& file);

// The trace in `file` (orrery or Kineto) as an ExecGraph; what a Kineto import skipped goes to
// `notes`.
pb::ExecGraph read_measured_trace(const std::string& file, std::vector<std::string>& notes);

}  // namespace orrery::cli
