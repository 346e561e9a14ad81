// Spawns the ranks of a single-host job as real processes (Gloo over loopback), torchrun-style:
// each gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Rank 0's standard output is
// passed through; every rank's standard error is forwarded with a "[rank N] " prefix. A rank that
// exits with an error or is killed stops the whole job: the others are terminated and
// launch_local throws EnvironmentError naming the first rank that failed and the ranks that were
// silent (the likely hung ones). Never hangs: ranks fail their collectives after `timeout_s`, and
// the launcher itself gives up on a rank silent for timeout_s + max(5 s, timeout_s / 2).
#pragma once

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace orrery::executor {

struct LaunchOptions {
  std::vector<std::string> argv;  // the rank program (absolute path) and its arguments
  int64_t world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;          // 0: a free loopback port is picked
  double timeout_s = 60;        // the ranks' collective timeout (see above)
  std::ostream* out = nullptr;  // rank 0's standard output (default: std::cout)
};

// SIGINT or SIGTERM reached the launcher while its ranks ran: they were stopped (SIGTERM, then
// SIGKILL after 2 s) and their output drained. Not an EnvironmentError, so no restart policy
// retries it; `orrery run` exits with 128 + signal, as a shell expects of an interrupted program.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Throws EnvironmentError when a rank fails (above), Interrupted on SIGINT/SIGTERM.
void launch_local(const LaunchOptions& options);

// A TCP port on `addr` that was free when asked (bound to port 0, then released).
int pick_free_port(const std::string& addr);

}  // namespace orrery::executor
