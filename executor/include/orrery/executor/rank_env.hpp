// A rank's place in the job, from the environment its launcher set:
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;
//   OpenMPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   (MASTER_ADDR / MASTER_PORT still locate the c10d TCPStore: default 127.0.0.1:29500 when the
//   job is on one host, required when OMPI_COMM_WORLD_LOCAL_SIZE says it spans hosts).
// Both sets may be present (torchrun variables exported through `mpirun -x`); they must agree.
// The rank-0 process hosts the c10d TCPStore unless TORCHELASTIC_USE_AGENT_STORE=True says the
// launcher already does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace orrery::executor {

struct RankEnv {
  enum class Source { kTorchrun, kOpenMpi };
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // the store server runs elsewhere
  // Which variables gave the rank. Under mpirun every rank's standard output reaches the user,
  // so only rank 0 prints the step lines.
  Source source = Source::kTorchrun;
};

// From the environment when RANK and WORLD_SIZE, or OMPI_COMM_WORLD_RANK and
// OMPI_COMM_WORLD_SIZE, are set; nullopt when neither pair is. Malformed or inconsistent values
// (one variable of a pair without the other, the two launchers' variables disagreeing, a
// multi-host mpirun job without MASTER_ADDR) throw InputError naming the variables.
std::optional<RankEnv> rank_env_from_environment();

}  // namespace orrery::executor
