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

// A file's whole content, bytes as they are ("" when it cannot be read).
std::string read_file(const std::string& path);

}  // namespace orrery::testing
