// Temporary files (and folders of files) that must not outlive the process that writes them (a
// partial output written beside its final path, then renamed over it). While one is registered, a
// SIGINT, SIGTERM or SIGHUP removes it before the process ends as the signal would end it; an
// exception or a return removes it through TempPath's destructor. Only a SIGKILL or a power cut
// can leave one behind, and its name says which process wrote it (stale_writer).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orrery::base {

// Installs the handlers (idempotent). A handler already installed for one of the signals (the
// launcher of `orrery run`) is called after the temporaries are removed; otherwise the process
// then ends by the signal's default action, so its exit status still says which signal it was.
void remove_temporaries_on_signals();

// A registered temporary file: removed when the object dies unless release() was called after it
// was renamed to its final place.
class TempPath {
 public:
  explicit TempPath(std::filesystem::path path);
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  ~TempPath();

  const std::filesystem::path& path() const { return path_; }
  void release();  // the path is no longer temporary (renamed away): nothing to remove

 private:
  std::filesystem::path path_;
  int slot_ = -1;  // its slot in the signal handler's table; -1 when the table was full
};

// The temporary name of `final_path` for this process: ".NAME.tmp<pid>" in the same folder (the
// same file system, so the rename is atomic).
std::filesystem::path temp_path_for(const std::filesystem::path& final_path);

// When `temp` is a temporary of `final_path` (".NAME.tmp<pid>") whose process no longer runs, that
// pid: what a run killed while it wrote left behind.
std::optional<long> stale_writer(const std::filesystem::path& final_path,
                                 const std::filesystem::path& temp);

// Writes `bytes` to `final_path` so that it survives a crash or a power cut whole or not at all:
// a registered temporary (temp_path_for), fsync, rename over final_path, fsync of the folder (so
// the rename itself is on disk). Replaces an existing file. EnvironmentError when the disk refuses.
void write_file_durably(const std::filesystem::path& final_path, std::string_view bytes);

// Writes `files` (name in the folder, bytes) as the folder `folder`, whole or not at all: into a
// registered temporary folder beside it (each file fsynced), then renamed into place; an existing
// `folder` is exchanged for the new one in a single rename and removed (callers decide whether
// it may be replaced). A signal or an exception removes the temporary folder with its files.
// EnvironmentError when the disk refuses.
void write_folder_durably(const std::filesystem::path& folder,
                          const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace orrery::base
