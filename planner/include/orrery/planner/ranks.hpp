// Spreading candidate evaluation over processes. The search hands each batch of candidates to a
// `Ranks`: candidate i is evaluated on rank i % size, and every rank receives every evaluation
// (an all-gather), so all ranks continue the same search and end with the same ranking as one
// process. `mpi_world()` is the MPI implementation, used only when the process was started by
// mpirun; a plain process never initializes MPI.
#pragma once

#include <string>
#include <vector>

namespace orrery::planner {

class Ranks {
 public:
  virtual ~Ranks() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every rank passes its bytes and gets every rank's bytes, in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) const = 0;
};

// True when the environment says this process is one of several started by mpirun
// (OpenMPI's OMPI_COMM_WORLD_SIZE is set).
bool started_by_mpirun();

// True when the planner was built with MPI (find_package(MPI) found it).
bool built_with_mpi();

// The MPI world, initialized on the first call, when started_by_mpirun() and built_with_mpi();
// nullptr otherwise, and after end_mpi_world(). Started by mpirun without MPI support, it says
// once on stderr that every rank will run the whole search alone.
const Ranks* mpi_world();

// Ends the MPI world after a search that used it: MPI_Finalize on every rank, then ranks other
// than 0 leave the process (exit status 0) so that only rank 0 prints and writes files. Rank 0
// returns and plans single-process from here on. Nothing to do when the world was never started.
void end_mpi_world();

}  // namespace orrery::planner
