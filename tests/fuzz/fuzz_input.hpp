// What every fuzz target shares (docs/development.md#fuzzing): the input as text, the input as a
// file for the readers that take a path, and the one outcome a bad input may have besides being
// read: base::InputError. Any other exception escapes to libFuzzer, which reports it as a crash,
// because the CLI would print it as an internal error (exit 70).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "orrery/base/error.hpp"

namespace orrery::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input as a file. An anonymous memory file (memfd) seen through /proc/self/fd, so a run
// that is killed or stopped by libFuzzer leaves nothing on disk.
class InputFile {
 public:
  InputFile() : fd_(memfd_create("orrery-fuzz-input", 0)) {
    if (fd_ < 0) std::abort();
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { close(fd_); }

  std::filesystem::path write(std::string_view text) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n =
          pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

// Runs `read`; an InputError is the expected refusal of a bad input.
template <typename Read>
void refuse_or_read(Read&& read) {
  try {
    read();
  } catch (const base::InputError&) {
  }
}

}  // namespace orrery::fuzz
