// simulate_des (orrery/sim/des_engine.hpp): SimGrid allows one engine per process, so the
// engine runs in a forked child; the child sends back one message on a pipe:
//   'O' <u64 size> <SimResult> <ExecGraph timeline>      success (serialized protobufs)
//   'I' <field> '\n' <reason>                            InputError (deadlock, bad graph)
//   'B' <reason>                                         DesOverBudget: out of its memory limit
//   'E' <message> / 'X' <message>                        EnvironmentError / anything else
// The parent waits for the child and rethrows its errors as the same kind. Several threads may
// run simulations at once (the planner's des ranking): only the fork itself and the decoding of
// results are serialized (fork_lock), so that no thread holds a library lock (protobuf parsing,
// stream buffers) at the instant another forks, while the children run side by side.
#include "orrery/sim/des_engine.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <new>
#include <optional>

#include "des_internal.hpp"
#include "orrery/base/error.hpp"

namespace orrery::sim {
namespace {

std::mutex fork_lock;

std::string run_child(const plan::ResolvedPlan& plan, const CostModels& costs,
                      const DesOptions& options) {
  try {
    des::Router router(costs.topology());
    des::Model model = des::build_model(plan, costs, options, router);
    const des::RunStats stats = des::run_engine(model, costs, plan, router);
    const pb::SimResult result = des::make_result(plan, model, stats);
    std::string r = result.SerializeAsString();
    std::string t = options.timeline ? model.graph.SerializeAsString() : std::string();
    const uint64_t size = r.size();
    std::string out = "O";
    out.append(reinterpret_cast<const char*>(&size), sizeof size);
    return out + r + t;
  } catch (const std::bad_alloc&) {
    return "Bthe des engine ran out of memory (an allocation failed) before it finished";
  } catch (const base::InputError& e) {
    return "I" + e.field() + "\n" + e.reason();
  } catch (const base::EnvironmentError& e) {
    return std::string("E") + e.what();
  } catch (const std::exception& e) {
    return std::string("X") + e.what();
  }
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
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
  if (options.all_ranks || !plan.uniform_stages()) return plan.world_size();  // see build_model
  return static_cast<int64_t>(des::representatives(plan, costs, options.fold_cp).ranks.size());
}

SimOutput simulate_des(const plan::ResolvedPlan& plan, const CostModels& costs,
                       const DesOptions& options) {
  des::check_budget(plan, costs, options);
  const auto started = std::chrono::steady_clock::now();
  int fds[2];
  std::unique_lock<std::mutex> forking(fork_lock);
  if (::pipe(fds) != 0)
    throw base::EnvironmentError(std::string("des: pipe: ") + std::strerror(errno));
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw base::EnvironmentError(std::string("des: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    des::limit_memory(options, fds[1]);
    write_all(fds[1], run_child(plan, costs, options));
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  forking.unlock();
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (options.time_limit_s > 0) {
    deadline = started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(options.time_limit_s));
  }
  std::string data;
  const bool finished = read_all(fds[0], data, deadline);
  ::close(fds[0]);
  int status = 0;
  if (!finished) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw DesTimedOut("des: the simulation ran past its limit of " +
                      std::to_string(options.time_limit_s) + " s and was stopped");
  }
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::lock_guard<std::mutex> decoding(fork_lock);
  SimOutput out = decode(data, status);
  out.result.set_wall_time_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return out;
}

}  // namespace orrery::sim
