#include "run_command.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace orrery::testing {

CommandResult run_command(const std::string& command_line) {
  namespace fs = std::filesystem;
  const fs::path err_file =
      fs::temp_directory_path() / ("orrery_cli_err_" + std::to_string(::getpid()));
  CommandResult result;
  FILE* pipe = ::popen((command_line + " 2>" + err_file.string()).c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.out.append(buf, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::ostringstream err;
  err << in.rdbuf();
  result.err = err.str();
  fs::remove(err_file);
  return result;
}

std::string result_body(const std::string& json) {
  std::string out = json;
  for (const std::string key : {"\"schema\": ", "\"schema_version\": "}) {
    const size_t at = out.find(key);
    if (at == std::string::npos) continue;
    const size_t line_start = out.rfind('\n', at);
    const size_t line_end = out.find('\n', at);
    out.erase(line_start, line_end - line_start);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace orrery::testing
