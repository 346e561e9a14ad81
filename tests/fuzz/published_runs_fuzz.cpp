// libFuzzer target for the published-runs reader of `validate --runs` (validation/src/
// run_validation.cpp, published_run_fields.cpp): every case mapped to a model, a cluster and a
// plan, as validate_runs maps them before it simulates.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "orrery/validation/run_validation.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static orrery::fuzz::InputFile file;
  const auto path = file.write(orrery::fuzz::as_text(data, size));
  orrery::fuzz::refuse_or_read([&] { orrery::validation::published_runs(path); });
  return 0;
}
