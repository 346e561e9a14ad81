#include "orrery/executor/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "orrery/base/error.hpp"
#include "orrery/executor/blas_kernels.hpp"

extern char** environ;

namespace orrery::executor {
namespace {

using Clock = std::chrono::steady_clock;

// The signal that asked the launcher to stop (0: none). Set by the handler, read by the loop.
volatile std::sig_atomic_t stop_signal = 0;
extern "C" void on_stop_signal(int sig) { stop_signal = sig; }

// SIGINT and SIGTERM set stop_signal while a job runs (the loop then stops the ranks and says
// why), and get their previous handlers back afterwards. Without SA_RESTART, so the loop's poll
// returns at once.
class StopSignals {
 public:
  StopSignals() {
    stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

struct Rank {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  Clock::time_point last_output;
  Clock::time_point closed_at = Clock::time_point::max();  // standard output reached EOF: it exited
  bool exited = false;
  int status = 0;
};

std::vector<std::string> rank_environment(const LaunchOptions& o, int64_t rank, int port) {
  std::vector<std::string> env;
  const std::vector<std::string> ours = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "TORCHELASTIC_USE_AGENT_STORE"};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& k : ours) replaced = replaced || key == k;
    if (!replaced) env.push_back(entry);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(o.world_size));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.world_size));
  env.push_back("MASTER_ADDR=" + o.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  // One intra-op thread per rank: N ranks on N cores must not oversubscribe them.
  env.push_back("OMP_NUM_THREADS=1");
  // OpenBLAS's kernels for this CPU where its own detection falls back (blas_kernels.hpp).
  if (const std::string coretype = blas_coretype_to_set(); !coretype.empty()) {
    env.push_back("OPENBLAS_CORETYPE=" + coretype);
    env.push_back(std::string(kBlasChosenVariable) + "=" + coretype);
  }
  return env;
}

Rank spawn(const LaunchOptions& o, int64_t rank, int port) {
  std::vector<std::string> env = rank_environment(o, rank, port);
  std::vector<char*> argv, envp;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw base::EnvironmentError("pipe: " + std::string(std::strerror(errno)));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw base::EnvironmentError("fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives its launcher
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::close(err[0]);
    ::close(err[1]);
    ::execve(argv[0], argv.data(), envp.data());
    const std::string msg = "cannot execute " + o.argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  Rank r;
  r.pid = pid;
  r.out_fd = out[0];
  r.err_fd = err[0];
  r.last_output = Clock::now();
  return r;
}

// Moves complete lines out of `buf` (all of it when `flush`), each to `sink` with `prefix`.
void emit_lines(std::string& buf, std::ostream* sink, const std::string& prefix, bool flush) {
  size_t start = 0, nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    if (sink != nullptr) *sink << prefix << buf.substr(start, nl - start + 1) << std::flush;
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush && !buf.empty()) {
    if (sink != nullptr) *sink << prefix << buf << "\n" << std::flush;
    buf.clear();
  }
}

class Job {
 public:
  Job(const LaunchOptions& o, int port) : o_(o), sink_(o.out != nullptr ? o.out : &std::cout) {
    for (int64_t r = 0; r < o.world_size; ++r) ranks_.push_back(spawn(o, r, port));
  }
  ~Job() { stop_all(); }

  void run() {
    while (true) {
      pump(100);
      if (stop_signal != 0) interrupt(stop_signal);
      reap();
      // A rank's failure makes its peers fail too: blame the one whose output closed first.
      std::optional<size_t> first;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        const auto& k = ranks_[r];
        const bool failed = k.exited && !(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0);
        if (failed && (!first || k.closed_at < ranks_[*first].closed_at)) first = r;
      }
      if (first) fail(*first, describe(ranks_[*first].status));
      bool all_done = true;
      for (const auto& k : ranks_) all_done = all_done && k.exited;
      if (all_done) break;
      const auto now = Clock::now();
      for (size_t r = 0; r < ranks_.size(); ++r) {
        const double silent = std::chrono::duration<double>(now - ranks_[r].last_output).count();
        if (!ranks_[r].exited && silent > silence_limit_s()) {
          std::ostringstream why;
          why << "made no progress for " << static_cast<int>(silent) << " s (hung?)";
          fail(r, why.str());
        }
      }
    }
    drain();
  }

 private:
  // Ranks waiting on a hung peer fail on their own collective timeout first and say so; the
  // launcher's own limit is the backstop for a job where every rank hangs.
  double silence_limit_s() const { return o_.timeout_s + std::max(5.0, o_.timeout_s / 2); }

  static std::string describe(int status) {
    if (WIFSIGNALED(status)) {
      return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
             ::strsignal(WTERMSIG(status)) + ")";
    }
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }

  // Stops every rank and says why the job ended. Ranks of the same terminal got the SIGINT too
  // and may have exited already; the others get SIGTERM here.
  [[noreturn]] void interrupt(int sig) {
    stop_all();
    drain();
    const std::string name = sig == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM";
    throw Interrupted(sig, "interrupted by " + name + ": stopped the job's " +
                               std::to_string(ranks_.size()) +
                               " rank(s); the steps printed above are complete, and their step "
                               "files and checkpoints are kept");
  }

  [[noreturn]] void fail(size_t rank, const std::string& why) {
    // Ranks still running but silent for a while are likely where the trouble is.
    std::string silent;
    const auto now = Clock::now();
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const double s = std::chrono::duration<double>(now - ranks_[r].last_output).count();
      if (r != rank && !ranks_[r].exited && s >= 2) {
        silent += "; rank " + std::to_string(r) + " is still running but has printed nothing for " +
                  std::to_string(static_cast<int>(s)) + " s (hung?)";
      }
    }
    stop_all();
    drain();
    throw base::EnvironmentError("rank " + std::to_string(rank) + " of " +
                                 std::to_string(ranks_.size()) + " " + why + silent +
                                 "; stopped the job");
  }

  // Reads what the exited ranks left in their pipes (at most 2 s), then prints partial lines.
  void drain() {
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    auto open = [&] {
      for (const auto& k : ranks_)
        if (k.out_fd >= 0 || k.err_fd >= 0) return true;
      return false;
    };
    while (open() && Clock::now() < deadline) pump(50);
    flush_all();
  }

  void pump(int wait_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> owner;  // rank, is stderr
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].out_fd >= 0) {
        fds.push_back({ranks_[r].out_fd, POLLIN, 0});
        owner.push_back({r, false});
      }
      if (ranks_[r].err_fd >= 0) {
        fds.push_back({ranks_[r].err_fd, POLLIN, 0});
        owner.push_back({r, true});
      }
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      return;
    }
    if (::poll(fds.data(), fds.size(), wait_ms) <= 0) return;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto& k = ranks_[owner[i].first];
      const bool is_err = owner[i].second;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        (is_err ? k.err_fd : k.out_fd) = -1;
        if (!is_err) k.closed_at = Clock::now();
        continue;
      }
      k.last_output = Clock::now();
      const std::string prefix = "[rank " + std::to_string(owner[i].first) + "] ";
      if (is_err) {
        k.err_buf.append(buf, static_cast<size_t>(n));
        emit_lines(k.err_buf, &std::cerr, prefix, false);
      } else {
        k.out_buf.append(buf, static_cast<size_t>(n));
        emit_lines(k.out_buf, owner[i].first == 0 ? sink_ : nullptr, "", false);
      }
    }
  }

  void flush_all() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      emit_lines(ranks_[r].out_buf, r == 0 ? sink_ : nullptr, "", true);
      emit_lines(ranks_[r].err_buf, &std::cerr, "[rank " + std::to_string(r) + "] ", true);
    }
  }

  void reap() {
    for (auto& k : ranks_) {
      if (k.exited) continue;
      if (::waitpid(k.pid, &k.status, WNOHANG) == k.pid) k.exited = true;
    }
  }

  // SIGTERM, up to 2 s of grace, then SIGKILL; reaps every child.
  void stop_all() {
    for (auto& k : ranks_)
      if (!k.exited) ::kill(k.pid, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < deadline) {
      reap();
      bool all = true;
      for (const auto& k : ranks_) all = all && k.exited;
      if (all) break;
      pump(50);
    }
    for (auto& k : ranks_) {
      if (k.exited) continue;
      ::kill(k.pid, SIGKILL);
      ::waitpid(k.pid, &k.status, 0);
      k.exited = true;
    }
  }

  const LaunchOptions& o_;
  std::ostream* sink_;
  std::vector<Rank> ranks_;
};

}  // namespace

int pick_free_port(const std::string& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw base::EnvironmentError("socket: " + std::string(std::strerror(errno)));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    ::close(fd);
    throw base::EnvironmentError("cannot find a free port on " + addr + ": " +
                                 std::strerror(errno));
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

void launch_local(const LaunchOptions& options) {
  ORRERY_CHECK(!options.argv.empty() && options.world_size >= 1,
               "launch needs a program and ranks");
  const int port =
      options.master_port > 0 ? options.master_port : pick_free_port(options.master_addr);
  const StopSignals signals;
  Job job(options, port);
  job.run();
}

}  // namespace orrery::executor
