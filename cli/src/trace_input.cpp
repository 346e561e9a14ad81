#include "trace_input.hpp"

#include <algorithm>
#include <filesystem>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/base/units.hpp"
#include "orrery/traces/json_stream.hpp"
#include "orrery/traces/kineto.hpp"
#include "orrery/traces/kineto_file.hpp"
#include "orrery/traces/spec_io.hpp"

namespace orrery::cli {
namespace {

// What reading `file` is expected to need at its peak.
double trace_peak_bytes(const std::string& file) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) return 0;  // the reader names the file's problem
  // How each format is read decides what it holds: a Kineto trace as text and nlohmann's tree,
  // a YAML one as text and yaml-cpp's tree, an orrery JSON trace as the message alone.
  double per_byte = kStreamedTraceBytesPerFileByte;
  if (is_kineto_trace_file(file)) {
    per_byte = kKinetoTraceBytesPerFileByte;
  } else if (std::filesystem::path(file).extension() != ".json") {
    per_byte = kYamlTraceBytesPerFileByte;
  }
  return static_cast<double>(size) * per_byte;
}

}  // namespace

void check_trace_memory(const std::vector<std::string>& files, const std::string& flag,
                        double limit) {
  if (limit <= 0) return;
  for (const auto& file : files) {
    base::require_input_file(file);
    const double need = trace_peak_bytes(file);
    if (need <= limit) continue;
    throw base::InputError(
        file, 0, flag,
        "reading this trace needs about " + base::units::bytes(need) + " of memory (" +
            base::units::bytes(static_cast<double>(std::filesystem::file_size(file))) +
            " of file), more than the limit of " + base::units::bytes(limit) +
            " (--host-memory, else what /proc/meminfo calls available); --host-memory SIZE "
            "raises the limit, or split the run into shorter traces");
  }
}

pb::ExecGraph read_orrery_trace(const std::string& file) {
  pb::ExecGraph graph;
  if (std::filesystem::path(file).extension() == ".json") {
    read_json_file_streaming(file, &graph);
  } else {
    read_spec_file(file, &graph);
  }
  return graph;
}

pb::ExecGraph read_measured_trace(const std::string& file, std::vector<std::string>& notes) {
  base::require_input_file(file);
  if (is_kineto_trace_file(file)) {
    const std::string text = base::read_input_file(file);
    KinetoImport imported = import_kineto(text, file);
    for (const auto& [why, count] : imported.skipped)
      notes.push_back(file + ": " + std::to_string(count) + " x " + why);
    return std::move(imported.graph);
  }
  return read_orrery_trace(file);
}

}  // namespace orrery::cli
