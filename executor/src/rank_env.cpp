#include "orrery/executor/rank_env.hpp"

#include <cstdlib>
#include <string>

#include "orrery/traces/error.hpp"

namespace orrery::executor {
namespace {

int64_t int_var(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < min || value > max) {
    throw InputError("", 0, std::string("environment ") + name,
                     std::string("got '") + text + "', expected an integer in [" +
                         std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  if (std::getenv("RANK") == nullptr || std::getenv("WORLD_SIZE") == nullptr) return std::nullopt;
  RankEnv env;
  env.world_size = int_var("WORLD_SIZE", 1, 1, 1 << 20);
  env.rank = int_var("RANK", 0, 0, env.world_size - 1);
  env.local_rank = int_var("LOCAL_RANK", 0, 0, 1 << 20);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    env.master_addr = addr;
  }
  env.master_port = static_cast<int>(int_var("MASTER_PORT", 29500, 1, 65535));
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "1");
  return env;
}

}  // namespace orrery::executor
