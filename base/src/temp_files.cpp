#include "orrery/base/temp_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>  // RENAME_EXCHANGE
#include <cstring>
#include <system_error>

#include "orrery/base/error.hpp"

namespace orrery::base {
namespace {

// The signal handler may only call async-signal-safe functions, so the registered paths live in
// a fixed table of plain character arrays; a slot is claimed and given back with atomics.
constexpr int kSlots = 64;
constexpr size_t kPathBytes = 4096;
constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 holds a path
  char path[kPathBytes] = {};
};
std::array<Slot, kSlots> slots;
std::array<struct sigaction, kSignals.size()> previous{};
std::atomic<bool> installed{false};

// Removes a temporary folder of plain files (write_folder_durably's) from a signal handler, where
// opendir/readdir may not be called (they allocate): getdents64 into a stack buffer, unlinkat
// each entry, and read again from the start until only "." and ".." remain.
void remove_flat_folder(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[4096];
  for (int pass = 0; pass < 100000; ++pass) {
    ::lseek(fd, 0, SEEK_SET);
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    bool removed = false;
    for (long off = 0; off < n;) {
      // linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
      unsigned short reclen = 0;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      const bool dot = name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0));
      if (!dot && ::unlinkat(fd, name, 0) == 0) removed = true;
      off += reclen;
    }
    if (!removed) break;
  }
  ::close(fd);
  ::rmdir(path);
}

void on_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  for (auto& s : slots) {
    if (s.state.load() != 2) continue;
    if (::unlink(s.path) != 0 && errno == EISDIR) remove_flat_folder(s.path);
  }
  errno = saved_errno;
  for (size_t i = 0; i < kSignals.size(); ++i) {
    if (kSignals[i] != sig) continue;
    const auto& old = previous[i];
    if ((old.sa_flags & SA_SIGINFO) != 0 && old.sa_sigaction != nullptr) {
      old.sa_sigaction(sig, info, context);
      return;
    }
    if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN && old.sa_handler != nullptr) {
      old.sa_handler(sig);
      return;
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int claim(const std::filesystem::path& path) {
  const std::string text = path.string();
  if (text.size() >= kPathBytes) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(slots[i].path, text.c_str(), text.size() + 1);
    slots[i].state.store(2);
    return i;
  }
  return -1;
}

}  // namespace

void remove_temporaries_on_signals() {
  if (installed.exchange(true)) return;
  for (size_t i = 0; i < kSignals.size(); ++i) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(kSignals[i], &sa, &previous[i]);
  }
}

TempPath::TempPath(std::filesystem::path path) : path_(std::move(path)) { slot_ = claim(path_); }

TempPath::~TempPath() {
  if (slot_ >= 0) slots[slot_].state.store(0);
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // a temporary folder goes with its files
}

void TempPath::release() {
  if (slot_ >= 0) slots[slot_].state.store(0);
  slot_ = -1;
  path_.clear();
}

std::filesystem::path temp_path_for(const std::filesystem::path& final_path) {
  const std::filesystem::path dir =
      final_path.has_parent_path() ? final_path.parent_path() : std::filesystem::path(".");
  return dir / ("." + final_path.filename().string() + ".tmp" + std::to_string(::getpid()));
}

std::optional<long> stale_writer(const std::filesystem::path& final_path,
                                 const std::filesystem::path& temp) {
  const std::string prefix = "." + final_path.filename().string() + ".tmp";
  const std::string name = temp.filename().string();
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
    return std::nullopt;
  const long pid = std::stol(digits);
  if (pid == static_cast<long>(::getpid())) return std::nullopt;
  if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) return std::nullopt;
  return pid;
}

namespace {

[[noreturn]] void durable_write_failed(const std::filesystem::path& file, const char* what) {
  throw EnvironmentError(file.string() + ": could not be written durably (" + what + ": " +
                         std::strerror(errno) + ")");
}

// fsync of an open descriptor, retried when a signal interrupts it.
bool sync_fd(int fd) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

// The folder holding `path` (".", for a bare name), fsynced so a rename in it is on disk.
void sync_parent(const std::filesystem::path& path) {
  const std::filesystem::path dir =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) durable_write_failed(path, "open its folder");
  const bool dir_synced = sync_fd(dir_fd);
  ::close(dir_fd);
  if (!dir_synced) durable_write_failed(path, "fsync its folder");
}

}  // namespace

void write_file_durably(const std::filesystem::path& final_path, std::string_view bytes) {
  remove_temporaries_on_signals();
  TempPath temp(temp_path_for(final_path));
  const int fd = ::open(temp.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) durable_write_failed(final_path, "open");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      durable_write_failed(final_path, "write");
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = sync_fd(fd);
  if (::close(fd) != 0 || !synced) durable_write_failed(final_path, "fsync");
  if (::rename(temp.path().c_str(), final_path.c_str()) != 0)
    durable_write_failed(final_path, "rename");
  temp.release();
  sync_parent(final_path);
}

namespace {

// Puts the complete temporary folder in place of `folder`. An existing one is swapped out in one
// step (renameat2 RENAME_EXCHANGE: a reader sees the old set or the new, never neither) and then
// removed with the temporary. File systems without the exchange get two renames, with a moment
// in which `folder` is missing but never a mix.
void swap_in(TempPath& temp, const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::exists(folder, ec)) {
    if (::rename(temp.path().c_str(), folder.c_str()) != 0) durable_write_failed(folder, "rename");
    temp.release();
    return;
  }
  if (::syscall(SYS_renameat2, AT_FDCWD, temp.path().c_str(), AT_FDCWD, folder.c_str(),
                RENAME_EXCHANGE) == 0)
    return;  // the temporary now holds the old set; its destructor removes it
  if (errno != EINVAL && errno != ENOSYS) durable_write_failed(folder, "exchange");
  TempPath old(temp_path_for(folder.string() + ".old"));
  if (::rename(folder.c_str(), old.path().c_str()) != 0) durable_write_failed(folder, "rename");
  if (::rename(temp.path().c_str(), folder.c_str()) != 0) {
    const int err = errno;
    ::rename(old.path().c_str(), folder.c_str());  // the previous set goes back where it was
    errno = err;
    durable_write_failed(folder, "rename");
  }
  temp.release();
}

}  // namespace

void write_folder_durably(const std::filesystem::path& folder,
                          const std::vector<std::pair<std::string, std::string>>& files) {
  remove_temporaries_on_signals();
  TempPath temp(temp_path_for(folder));
  if (::mkdir(temp.path().c_str(), 0755) != 0) durable_write_failed(folder, "mkdir");
  for (const auto& [name, bytes] : files) write_file_durably(temp.path() / name, bytes);
  swap_in(temp, folder);
  sync_parent(folder);
}

}  // namespace orrery::base
