// simulate_des (orrery/sim/des_engine.hpp): SimGrid allows one engine per process, and only the
// engine's own program links it, so the engine runs in a process of its own, the helper
// orrery-des (des_main.cpp, found by base::find_helper). The job goes to its standard input as
// one pb::DesJob (des_job.hpp); its reply comes back on its standard output:
//   'O' <u64 size> <SimResult> <ExecGraph timeline>      success (serialized protobufs)
//   'I' <field> '\n' <reason>                            InputError (deadlock, bad graph)
//   'B' <reason>                                         DesOverBudget: out of its memory limit
//   'E' <message> / 'X' <message>                        EnvironmentError / anything else
// The parent waits for the helper and rethrows its errors as the same kind. Several threads may
// run simulations at once (the planner's des ranking): the helper is started with posix_spawn
// and every descriptor is close-on-exec, so one thread's helper never holds another's pipe open.
#include "orrery/sim/des_engine.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>

#include "des_internal.hpp"
#include "des_job.hpp"
#include "orrery/base/error.hpp"
#include "orrery/base/helper_programs.hpp"

extern char** environ;

namespace orrery::sim {
namespace {

// A socket, not a pipe, carries the job: send() with MSG_NOSIGNAL fails with EPIPE instead of
// killing this process when the helper dies before reading it all.
void send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the helper is gone: its exit status says why
    done += static_cast<size_t>(n);
  }
}

// Reads until end of file; false when `deadline` (if set) passes first.
bool read_all(int fd, std::string& out,
              std::optional<std::chrono::steady_clock::time_point> deadline) {
  char buf[1 << 16];
  for (;;) {
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) continue;
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

SimOutput decode(const std::string& data, int status) {
  if (data.empty()) {
    const std::string how = WIFSIGNALED(status)
                                ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                : "exited with status " + std::to_string(WEXITSTATUS(status));
    throw base::InternalError("des: the engine process " + how + " without a result");
  }
  const std::string body = data.substr(1);
  switch (data[0]) {
    case 'O': {
      uint64_t size = 0;
      ORRERY_CHECK(body.size() >= sizeof size, "des: truncated result from the engine process");
      std::memcpy(&size, body.data(), sizeof size);
      ORRERY_CHECK(body.size() >= sizeof size + size,
                   "des: truncated result from the engine process");
      SimOutput out;
      ORRERY_CHECK(out.result.ParseFromArray(body.data() + sizeof size, static_cast<int>(size)),
                   "des: unreadable result from the engine process");
      ORRERY_CHECK(out.timeline.ParseFromString(body.substr(sizeof size + size)),
                   "des: unreadable timeline from the engine process");
      return out;
    }
    case 'I': {
      const size_t nl = body.find('\n');
      throw base::InputError("", 0, body.substr(0, nl),
                             nl == std::string::npos ? "" : body.substr(nl + 1));
    }
    case 'B':
      throw DesOverBudget("", 0, "des budget", body);
    case 'E':
      throw base::EnvironmentError(body);
    default:
      throw base::InternalError(body);
  }
}

}  // namespace

int64_t des_simulated_ranks(const plan::ResolvedPlan& plan, const CostModels& costs,
                            const DesOptions& options) {
  if (options.graph != nullptr) return options.graph->ranks_size();
  if (des::every_rank(plan, costs, options)) return plan.world_size();
  return static_cast<int64_t>(des::representatives(plan, costs, options.fold_cp).ranks.size());
}

namespace {

struct Helper {
  pid_t pid = -1;
  int in = -1;   // our end of its standard input
  int out = -1;  // our end of its standard output
};

// Starts orrery-des with the job's socket as its standard input and a pipe as its standard
// output; its standard error is ours.
Helper spawn_helper() {
  const std::string path = base::find_helper("orrery-des");
  int job[2], reply[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, job) != 0)
    throw base::EnvironmentError(std::string("des: socketpair: ") + std::strerror(errno));
  if (::pipe2(reply, O_CLOEXEC) != 0) {
    ::close(job[0]);
    ::close(job[1]);
    throw base::EnvironmentError(std::string("des: pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, job[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, reply[1], STDOUT_FILENO);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  char* argv[] = {const_cast<char*>(path.c_str()), nullptr};
  Helper h;
  const int rc = ::posix_spawn(&h.pid, path.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(job[1]);
  ::close(reply[1]);
  h.in = job[0];
  h.out = reply[0];
  if (rc != 0) {
    ::close(h.in);
    ::close(h.out);
    throw base::EnvironmentError("des: cannot start " + path + ": " + std::strerror(rc));
  }
  return h;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

SimOutput simulate_des(const plan::ResolvedPlan& plan, const CostModels& costs,
                       const DesOptions& options) {
  des::check_budget(plan, costs, options);
  const auto started = std::chrono::steady_clock::now();
  const std::string job = des::to_job(plan, costs, options).SerializeAsString();
  Helper helper = spawn_helper();
  send_all(helper.in, job);
  ::close(helper.in);
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (options.time_limit_s > 0) {
    deadline = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(options.time_limit_s));
  }
  std::string data;
  const bool finished = read_all(helper.out, data, deadline);
  ::close(helper.out);
  if (!finished) {
    ::kill(helper.pid, SIGKILL);
    wait_for(helper.pid);
    throw DesTimedOut("des: the simulation ran past its limit of " +
                      std::to_string(options.time_limit_s) + " s and was stopped");
  }
  SimOutput out = decode(data, wait_for(helper.pid));
  out.result.set_wall_time_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return out;
}

}  // namespace orrery::sim
