// libFuzzer target for the import of PyTorch profiler (Kineto) traces (traces/src/kineto*.cpp),
// as `orrery calibrate` reads a trace file that is_kineto_trace recognises. What calibration then
// takes from the imported graph is measured_trace_fuzz's part.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "orrery/traces/kineto.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = orrery::fuzz::as_text(data, size);
  orrery::fuzz::refuse_or_read([&] {
    if (orrery::is_kineto_trace(text)) orrery::import_kineto(text, "fuzz.json");
  });
  return 0;
}
