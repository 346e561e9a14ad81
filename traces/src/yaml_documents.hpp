// The one YAML document of a file, read without YAML::LoadAll: yaml-cpp 0.7's LoadAll never
// returns on some invalid text (a lone ',' outside [] or {}: its parser yields the same empty
// document forever, allocating a node each time), which the fuzzer found (tests/fuzz/).
#pragma once

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace orrery::detail {

// The first document of `text`. InputError naming `file` when the text holds more than one
// document ("---"), or when the parser stops making progress; YAML::Exception when it is not
// valid YAML.
YAML::Node load_single_document(const std::string& text, std::string_view file);

}  // namespace orrery::detail
