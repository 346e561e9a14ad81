// libFuzzer target for the Hugging Face config.json import (models/src/hf_import.cpp): the input
// is the config file; the imported spec is also validated as load_model would.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "orrery/models/hf_import.hpp"
#include "orrery/models/model_catalog.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static orrery::fuzz::InputFile file;
  const auto path = file.write(orrery::fuzz::as_text(data, size));
  orrery::fuzz::refuse_or_read([&] {
    const orrery::pb::ModelSpec spec = orrery::models::import_hf_config(path, "fuzz");
    orrery::models::validate_model(spec, orrery::SourceMap("fuzz"));
  });
  return 0;
}
