// Reading a file the user named, with one rule for what goes wrong, whichever command reads it:
// a path that does not exist or names a directory is the user's mistake (InputError, exit 2); a
// file that exists but cannot be read is the environment's (EnvironmentError, exit 3).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace orrery::base {

// Throws unless `file` exists and is not a directory; `expected` names what it should be in the
// message ("is a directory, expected a JSON file").
void require_input_file(const std::filesystem::path& file, std::string_view expected = "a file");

// Whether a model or cluster argument names a file rather than a preset: it has a '/' or ends in
// .yaml, .yml or .json. One rule for every place that takes "a preset name or a file".
bool names_a_file(std::string_view name_or_file);

// The whole file, bytes as they are, after require_input_file.
std::string read_input_file(const std::filesystem::path& file,
                            std::string_view expected = "a file");

}  // namespace orrery::base
