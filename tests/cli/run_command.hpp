// Runs a command line through /bin/sh and captures its exit code, stdout and stderr.
#pragma once

#include <string>

namespace orrery::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult run_command(const std::string& command_line);

// A command's JSON result without its "schema" and "schema_version" keys (cli/src/output.hpp):
// the rest reads back as the message it was printed from.
std::string result_body(const std::string& json);

// A file's whole content, bytes as they are ("" when it cannot be read).
std::string read_file(const std::string& path);

}  // namespace orrery::testing
