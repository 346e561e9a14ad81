#include "orrery/planner/ranks.hpp"

#include <cstdlib>

namespace orrery::planner {

bool started_by_mpirun() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr && *size != '\0';
}

}  // namespace orrery::planner
