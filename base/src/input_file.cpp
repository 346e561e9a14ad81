#include "orrery/base/input_file.hpp"

#include <fstream>
#include <sstream>

#include "orrery/base/error.hpp"

namespace orrery::base {

void require_input_file(const std::filesystem::path& file, std::string_view expected) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw InputError(file.string(), 0, "", "no such file");
  // A directory opens as a stream that reads nothing, which would pass for an empty file.
  if (std::filesystem::is_directory(file, ec)) {
    throw InputError(file.string(), 0, "", "is a directory, expected " + std::string(expected));
  }
}

bool names_a_file(std::string_view s) {
  auto ends = [&](std::string_view suffix) { return s.ends_with(suffix); };
  return s.find('/') != std::string_view::npos || ends(".yaml") || ends(".yml") || ends(".json");
}

std::string read_input_file(const std::filesystem::path& file, std::string_view expected) {
  require_input_file(file, expected);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw EnvironmentError(file.string() + ": exists but cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw EnvironmentError(file.string() + ": reading failed");
  return text.str();
}

}  // namespace orrery::base
