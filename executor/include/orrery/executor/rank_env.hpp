// A rank's place in the job, torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT. The rank-0 process hosts the c10d TCPStore unless
// TORCHELASTIC_USE_AGENT_STORE=True says the launcher already does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace orrery::executor {

struct RankEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // the store server runs elsewhere
};

// From the environment when RANK and WORLD_SIZE are set, else nullopt. Malformed values throw
// InputError naming the variable.
std::optional<RankEnv> rank_env_from_environment();

}  // namespace orrery::executor
