// Helpers for the executor's multi-process tests: a fresh output directory and a job of the rank
// program (tests/executor/rank_main.cpp) launched through the executor's launcher.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "orrery/executor/launcher.hpp"

namespace orrery::executor::test {

inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("orrery-executor-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Runs the rank program on `world_size` local ranks with `args`; returns rank 0's output.
inline std::string launch(int64_t world_size, const std::vector<std::string>& args, double timeout_s = 120) {
  LaunchOptions o;
  o.argv = {ORRERY_EXECUTOR_RANK_BIN};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.world_size = world_size;
  o.timeout_s = timeout_s;
  std::ostringstream out;
  o.out = &out;
  launch_local(o);
  return out.str();
}

}  // namespace orrery::executor::test
