#include "orrery/executor/rank_env.hpp"

#include <cstdlib>
#include <string>

#include "orrery/base/error.hpp"

namespace orrery::executor {
namespace {

bool is_set(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0';
}

[[noreturn]] void reject(const std::string& variables, const std::string& why) {
  throw base::InputError("", 0, "environment " + variables, why);
}

int64_t int_var(const char* name, int64_t fallback, int64_t min, int64_t max) {
  if (!is_set(name)) return fallback;
  const char* text = std::getenv(name);
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < min || value > max) {
    reject(name, std::string("got '") + text + "', expected an integer in [" + std::to_string(min) +
                     ", " + std::to_string(max) + "]");
  }
  return value;
}

// A launcher's (rank, world size) pair: both variables or neither.
bool pair_set(const char* rank, const char* size) {
  if (is_set(rank) != is_set(size)) {
    reject(std::string(rank) + "/" + size, std::string(is_set(rank) ? rank : size) +
                                               " is set but " + (is_set(rank) ? size : rank) +
                                               " is not; a launcher sets both");
  }
  return is_set(rank);
}

// When both launchers' variables are present, the torchrun one must say what OpenMPI says.
void check_agrees(const char* torchrun, const char* ompi, int64_t value, int64_t ompi_value) {
  if (value != ompi_value) {
    reject(std::string(torchrun) + "/" + ompi,
           std::string(torchrun) + " is " + std::to_string(value) + " but " + ompi + " is " +
               std::to_string(ompi_value) + "; unset one of them or make them agree");
  }
}

}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  constexpr int64_t kMaxRanks = 1 << 20;
  const bool torchrun = pair_set("RANK", "WORLD_SIZE");
  const bool ompi = pair_set("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  if (!torchrun && !ompi) return std::nullopt;
  RankEnv env;
  if (ompi) {
    env.source = RankEnv::Source::kOpenMpi;
    env.world_size = int_var("OMPI_COMM_WORLD_SIZE", 1, 1, kMaxRanks);
    env.rank = int_var("OMPI_COMM_WORLD_RANK", 0, 0, env.world_size - 1);
    const int64_t local_size =
        int_var("OMPI_COMM_WORLD_LOCAL_SIZE", env.world_size, 1, env.world_size);
    env.local_rank = int_var("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, local_size - 1);
    // A job spread over hosts cannot find rank 0's store on loopback.
    if (local_size < env.world_size && !is_set("MASTER_ADDR")) {
      reject(
          "MASTER_ADDR",
          "mpirun placed " + std::to_string(env.world_size) + " ranks on several hosts (" +
              std::to_string(local_size) +
              " on this one): set MASTER_ADDR to rank 0's host, e.g. mpirun -x MASTER_ADDR=<host>");
    }
  }
  if (torchrun) {
    const int64_t world_size = int_var("WORLD_SIZE", 1, 1, kMaxRanks);
    const int64_t rank = int_var("RANK", 0, 0, world_size - 1);
    if (ompi) {
      check_agrees("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", world_size, env.world_size);
      check_agrees("RANK", "OMPI_COMM_WORLD_RANK", rank, env.rank);
      if (is_set("LOCAL_RANK")) {
        check_agrees("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                     int_var("LOCAL_RANK", 0, 0, kMaxRanks), env.local_rank);
      }
    } else {
      env.world_size = world_size;
      env.rank = rank;
      env.local_rank = int_var("LOCAL_RANK", 0, 0, kMaxRanks);
    }
  }
  if (is_set("MASTER_ADDR")) env.master_addr = std::getenv("MASTER_ADDR");
  env.master_port = static_cast<int>(int_var("MASTER_PORT", 29500, 1, 65535));
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "1");
  return env;
}

}  // namespace orrery::executor
