#include "orrery/base/helper_programs.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "orrery/base/error.hpp"

namespace orrery::base {

// The build tree's cli/ for code running from inside the build tree (base/CMakeLists.txt), the
// installed libexec/orrery for a program built against the installed package
// (cmake/helper_dirs_installed.cpp.in). `code_file`: the file holding this code.
std::vector<std::string> configured_helper_dirs(const std::string& code_file);

namespace {

// The executable or shared object this code was linked into: the program itself, or e.g. the
// Python module, whose process is python3.
std::filesystem::path code_file(const std::filesystem::path& self) {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&helper_directories), &info) != 0 &&
      info.dli_fname != nullptr && info.dli_fname[0] == '/') {
    std::error_code ec;
    auto path = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) return path;
  }
  return self;
}

}  // namespace

std::vector<std::string> helper_directories() {
  std::vector<std::string> dirs;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(self.parent_path().string());
    dirs.push_back((self.parent_path().parent_path() / "libexec" / "orrery").string());
  }
  for (std::string& dir : configured_helper_dirs(code_file(self).string())) {
    dirs.push_back(std::move(dir));
  }
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
