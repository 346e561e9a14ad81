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

// Peak memory (the process's peak RSS) per byte of file while a trace is read and used, measured
// with /usr/bin/time on the 2-core Debian VM (docs/benchmarks.md, "Large traces"), rounded up by
// about a tenth. JSON, streamed: `validate --trace` of the 175 MB `orrery_trace_gen` trace peaked
// at 2.76 bytes per file byte (calibrate 1.74). YAML (text, yaml-cpp's tree, the message): that
// generator's trace of 96 micro-batches as YAML (15.9 MB) peaked at 50.0 in `validate --trace`
// and `calibrate`. PyTorch profiler (text, nlohmann's tree, the import): 3,300 steps of
// tests/inputs/traces/kineto/cpu_gloo_rank0.json (18.1 MB) peaked at 12.1 in `calibrate`.
inline constexpr double kStreamedTraceBytesPerFileByte = 3.0;
inline constexpr double kYamlTraceBytesPerFileByte = 54.0;
inline constexpr double kKinetoTraceBytesPerFileByte = 13.0;

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
