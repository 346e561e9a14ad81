// orrery-des: the des engine's own process (SimGrid allows one engine per process, and only this
// program loads SimGrid). Reads one pb::DesJob on standard input (des_job.hpp), runs the engine
// and writes one reply on standard output, which simulate_des (des_engine.cpp) decodes:
//   'O' <u64 size> <SimResult> <ExecGraph timeline>      success (serialized protobufs)
//   'I' <field> '\n' <reason>                            InputError (deadlock, bad graph)
//   'B' <reason>                                         over budget, or out of memory
//   'E' <message> / 'X' <message>                        EnvironmentError / anything else
// Not a command for users: it takes no arguments and its input is orrery's internal message.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "des_internal.hpp"
#include "des_job.hpp"
#include "orrery/base/error.hpp"

namespace {

using namespace orrery;

std::string run(const std::string& input, int reply) {
  try {
    pb::DesJob job;
    ORRERY_CHECK(job.ParseFromString(input), "orrery-des: unreadable job on standard input");
    const sim::des::RebuiltJob in(std::move(job));
    // The backstop behind the des budget (des_memory_limit.cpp): from here on, an allocation
    // past the budget's memory replies 'B' and ends this process.
    sim::DesOptions limits = in.options;
    limits.max_nodes = in.job.max_nodes();
    limits.memory_limit_bytes = in.job.memory_limit_bytes();
    sim::des::limit_memory(limits, reply);
    sim::des::Router router(in.costs->topology());
    // Never freed: this process exits right after its reply, and freeing a graph of millions
    // of nodes node by node took 0.5 s of a 1.2-million-node run (KORT-T5-530B-seqsel).
    auto& model =
        *new sim::des::Model(sim::des::build_model(in.plan, *in.costs, in.options, router));
    const sim::des::RunStats stats =
        sim::des::run_engine(model, *in.costs, in.plan, router, in.options.chain_compute);
    const pb::SimResult result = sim::des::make_result(in.plan, model, stats);
    std::string r = result.SerializeAsString();
    std::string t = in.options.timeline ? model.graph.SerializeAsString() : std::string();
    const uint64_t size = r.size();
    std::string out = "O";
    out.append(reinterpret_cast<const char*>(&size), sizeof size);
    return out + r + t;
  } catch (const std::bad_alloc&) {
    return "Bthe des engine ran out of memory (an allocation failed) before it finished";
  } catch (const sim::DesOverBudget& e) {
    return "B" + e.reason();  // a symmetric run's budget, checked on its lowered graph
  } catch (const base::InputError& e) {
    return "I" + e.field() + "\n" + e.reason();
  } catch (const base::EnvironmentError& e) {
    return std::string("E") + e.what();
  } catch (const std::exception& e) {
    return std::string("X") + e.what();
  }
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main() {
  // The reply owns standard output: whatever else prints (SimGrid's warnings) goes to stderr.
  const int reply = ::dup(STDOUT_FILENO);
  if (reply < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) return 3;
  std::string input;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 3;
    if (n == 0) break;
    input.append(buf, static_cast<size_t>(n));
  }
  return write_all(reply, run(input, reply)) ? 0 : 3;
}
