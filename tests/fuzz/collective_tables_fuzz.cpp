// libFuzzer target for the collective tables of `validate --collectives` (validation/src/
// collective_validation*.cpp): the tables are read, mapped to clusters and every row predicted.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "orrery/validation/collective_validation.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static orrery::fuzz::InputFile file;
  const auto path = file.write(orrery::fuzz::as_text(data, size));
  orrery::fuzz::refuse_or_read([&] { orrery::validation::validate_collectives(path); });
  return 0;
}
