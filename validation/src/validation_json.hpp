// The one JSON parse of the validation data files (published runs, measured collective tables):
// strict JSON, and a key written twice in one object is refused, as the spec reader refuses it in
// plan and cluster files, instead of the last one silently winning.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace orrery::validation::detail {

// Parses `text`; InputError naming `file`, the key path ("cases[3].measured.iter_time_s") and
// the reason for invalid JSON, a number beyond a double, or a duplicate key.
nlohmann::json parse_validation_json(const std::string& text, const std::string& file);

// The one wording of a measured number's upper bound in these files: "got V, expected at most
// MAX (WHY)" when `value` (a number) is above `max`, else empty.
std::string above_bound(const nlohmann::json& value, double max, const char* why);

}  // namespace orrery::validation::detail
