// The MPI world for the planner (built when find_package(MPI) found OpenMPI): MPI_Init only when
// the process was started by mpirun, all-gathers with MPI_Allgatherv on MPI_COMM_WORLD.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include "orrery/base/error.hpp"
#include "orrery/planner/ranks.hpp"

namespace orrery::planner {
namespace {

// libmpi is not linked: it is loaded here, when a process started by mpirun first asks for its
// world, so that no other run of orrery loads MPI (docs/architecture.md, "Executables").
// ORRERY_LIBMPI is the libmpi.so (by its soname) that find_package(MPI) found at build time
// (planner/CMakeLists.txt). RTLD_GLOBAL: OpenMPI's own plugins, which it loads in MPI_Init, take
// their symbols from libmpi. The predefined handles and types (MPI_COMM_WORLD, MPI_INT) are
// addresses of OpenMPI data symbols, looked up the same way.
struct MpiApi {
  decltype(&MPI_Initialized) initialized;
  decltype(&MPI_Init_thread) init_thread;
  decltype(&MPI_Finalize) finalize;
  decltype(&MPI_Comm_set_errhandler) comm_set_errhandler;
  decltype(&MPI_Comm_rank) comm_rank;
  decltype(&MPI_Comm_size) comm_size;
  decltype(&MPI_Allgather) allgather;
  decltype(&MPI_Allgatherv) allgatherv;
  decltype(&MPI_Error_string) error_string;
  MPI_Comm comm_world;
  MPI_Datatype int_type;
  MPI_Datatype byte_type;
  MPI_Errhandler errors_return;
};

template <class F>
void resolve(void* library, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  if (f == nullptr) throw base::EnvironmentError(std::string(ORRERY_LIBMPI) + ": has no " + name);
}

const MpiApi& api() {
  static const MpiApi table = [] {
    void* library = dlopen(ORRERY_LIBMPI, RTLD_NOW | RTLD_GLOBAL);
    if (library == nullptr) {
      const char* why = dlerror();
      throw base::EnvironmentError(std::string("cannot load MPI (") + ORRERY_LIBMPI +
                                   "): " + (why != nullptr ? why : "unknown reason"));
    }
    MpiApi t{};
    resolve(library, "MPI_Initialized", t.initialized);
    resolve(library, "MPI_Init_thread", t.init_thread);
    resolve(library, "MPI_Finalize", t.finalize);
    resolve(library, "MPI_Comm_set_errhandler", t.comm_set_errhandler);
    resolve(library, "MPI_Comm_rank", t.comm_rank);
    resolve(library, "MPI_Comm_size", t.comm_size);
    resolve(library, "MPI_Allgather", t.allgather);
    resolve(library, "MPI_Allgatherv", t.allgatherv);
    resolve(library, "MPI_Error_string", t.error_string);
    resolve(library, "ompi_mpi_comm_world", t.comm_world);
    resolve(library, "ompi_mpi_int", t.int_type);
    resolve(library, "ompi_mpi_byte", t.byte_type);
    resolve(library, "ompi_mpi_errors_return", t.errors_return);
    return t;
  }();
  return table;
}

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  api().error_string(code, text, &length);
  throw base::EnvironmentError(std::string(call) +
                               " failed: " + std::string(text, static_cast<size_t>(length)));
}

class MpiRanks : public Ranks {
 public:
  MpiRanks() {
    int initialized = 0;
    check_mpi(api().initialized(&initialized), "MPI_Initialized");
    // FUNNELED: the search's worker threads never call MPI; only the thread that runs search()
    // does.
    int provided = 0;
    if (initialized == 0)
      check_mpi(api().init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
                "MPI_Init_thread");
    // Errors come back as codes (and become EnvironmentError) instead of aborting the job.
    check_mpi(api().comm_set_errhandler(api().comm_world, api().errors_return),
              "MPI_Comm_set_errhandler");
    check_mpi(api().comm_rank(api().comm_world, &rank_), "MPI_Comm_rank");
    check_mpi(api().comm_size(api().comm_world, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> allgather(const std::string& mine) const override {
    ORRERY_CHECK(mine.size() <= static_cast<size_t>(INT_MAX),
                 "one rank's evaluations exceed 2 GiB");
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    check_mpi(api().allgather(&length, 1, api().int_type, lengths.data(), 1, api().int_type,
                              api().comm_world),
              "MPI_Allgather");
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<size_t>(r)] = static_cast<int>(total);
      total += lengths[static_cast<size_t>(r)];
      ORRERY_CHECK(total <= INT_MAX, "the gathered evaluations exceed 2 GiB");
    }
    std::string all(static_cast<size_t>(total), '\0');
    check_mpi(api().allgatherv(mine.data(), length, api().byte_type, all.data(), lengths.data(),
                               offsets.data(), api().byte_type, api().comm_world),
              "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) {
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                               static_cast<size_t>(lengths[static_cast<size_t>(r)])));
    }
    return out;
  }

 private:
  int rank_ = 0, size_ = 1;
};

std::mutex world_mutex;
MpiRanks* world = nullptr;  // owned; lives until end_mpi_world (MPI_Finalize)
bool ended = false;

}  // namespace

bool built_with_mpi() { return true; }

const Ranks* mpi_world() {
  std::lock_guard<std::mutex> lock(world_mutex);
  if (world == nullptr && !ended && started_by_mpirun()) world = new MpiRanks();
  return world;
}

void end_mpi_world() {
  int rank = 0;
  {
    std::lock_guard<std::mutex> lock(world_mutex);
    if (world == nullptr) return;
    rank = world->rank();
    delete world;
    world = nullptr;
    ended = true;
    check_mpi(api().finalize(), "MPI_Finalize");
  }
  if (rank != 0) std::exit(0);
}

}  // namespace orrery::planner
