// libFuzzer target for measured traces as `orrery calibrate` reads them: an orrery ExecGraph
// (YAML and JSON) or a PyTorch profiler trace (Kineto), then the calibration samples taken from
// it (calibration/src/calibration_samples*.cpp).
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "orrery/calibration/calibration_samples.hpp"
#include "orrery/pb/exec_graph.pb.h"
#include "orrery/traces/kineto.hpp"
#include "orrery/traces/spec_io.hpp"

namespace {

void samples_of(const orrery::pb::ExecGraph& graph) {
  orrery::calibration::TraceSamples samples;
  orrery::calibration::add_trace_samples(graph, "fuzz", {}, samples);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = orrery::fuzz::as_text(data, size);
  if (orrery::is_kineto_trace(text)) {
    orrery::fuzz::refuse_or_read(
        [&] { samples_of(orrery::import_kineto(text, "fuzz.json").graph); });
    return 0;
  }
  for (const auto format : {orrery::SpecFormat::kYaml, orrery::SpecFormat::kJson}) {
    orrery::fuzz::refuse_or_read([&] {
      orrery::pb::ExecGraph graph;
      orrery::parse_spec(text, "fuzz", format, &graph);
      samples_of(graph);
    });
  }
  return 0;
}
