// The planner built without MPI: no world to spread over.
#include <cstdio>

#include "orrery/planner/ranks.hpp"

namespace orrery::planner {

bool built_with_mpi() { return false; }

const Ranks* mpi_world() {
  static const bool warned = [] {
    if (started_by_mpirun()) {
      std::fprintf(stderr,
                   "orrery: started by mpirun, but this build has no MPI support (install "
                   "libopenmpi-dev and "
                   "reconfigure); every rank runs the whole search alone\n");
    }
    return true;
  }();
  (void)warned;
  return nullptr;
}

void end_mpi_world() {}

}  // namespace orrery::planner
