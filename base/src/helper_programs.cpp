#include "orrery/base/helper_programs.hpp"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "orrery/base/error.hpp"

namespace orrery::base {

// Written by base/CMakeLists.txt (helper_dirs.cpp): the install prefix's libexec/orrery and the
// build tree's cli/.
const char* installed_helper_dir();
const char* build_helper_dir();

std::vector<std::string> helper_directories() {
  std::vector<std::string> dirs;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(self.parent_path().string());
    dirs.push_back((self.parent_path().parent_path() / "libexec" / "orrery").string());
  }
  dirs.emplace_back(installed_helper_dir());
  dirs.emplace_back(build_helper_dir());
  return dirs;
}

std::string find_helper(const std::string& name) {
  const std::vector<std::string> dirs = helper_directories();
  std::string searched;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  throw EnvironmentError("cannot find orrery's helper program " + name + " (searched " + searched +
                         "); build or install it beside the orrery command");
}

}  // namespace orrery::base
