// Outputs written whole or not at all: each file goes to a registered temporary beside it
// (base::TempPath, removed on any exit, signals included) and is renamed into place once complete.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include "orrery/base/temp_files.hpp"

namespace orrery::detail {

// A run killed while it wrote `file` (SIGKILL, a power cut: nothing could clean up) left its
// temporary (file or folder) in `dir`; it is removed, and named on stderr so the user knows why
// the output was missing.
void remove_stale_temporaries(const std::filesystem::path& file, const std::filesystem::path& dir);

// Checks that `file` may be written (InputError: it exists and !overwrite, or its folder does
// not), removes the temporaries of `file` left by killed runs (naming them on stderr) and writes
// `text` to a new temporary. EnvironmentError when the write fails.
std::unique_ptr<base::TempPath> write_temporary(const std::filesystem::path& file,
                                                std::string_view text, bool overwrite);

// Renames the temporary over `file`. EnvironmentError when the rename fails.
void commit_temporary(base::TempPath& temp, const std::filesystem::path& file);

}  // namespace orrery::detail
