// The MPI world for the planner (built when find_package(MPI) found OpenMPI): MPI_Init only when
// the process was started by mpirun, all-gathers with MPI_Allgatherv on MPI_COMM_WORLD.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include "orrery/base/error.hpp"
#include "orrery/planner/ranks.hpp"

namespace orrery::planner {
namespace {

// libsimgrid exports the MPI API too (SMPI), and the link puts it before libmpi, so a plain call
// to MPI_Init would land in SimGrid (which aborts outside smpirun). The functions are therefore
// taken from the loaded libmpi.so itself (dlsym on its handle finds its own definitions first).
// The handles and types (MPI_COMM_WORLD, MPI_INT) are OpenMPI data symbols SimGrid lacks.
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
};

// The path of the libmpi.so this process loaded (it is linked in), "" when none is.
std::string loaded_libmpi() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const auto slash = name.rfind('/');
        if (name.compare(slash == std::string::npos ? 0 : slash + 1, 9, "libmpi.so") != 0) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &found);
  return found;
}

template <class F>
void resolve(void* library, const char* name, const std::string& path, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  if (f == nullptr) throw base::EnvironmentError(path + ": has no " + name);
}

const MpiApi& api() {
  static const MpiApi table = [] {
    const std::string path = loaded_libmpi();
    void* library = path.empty() ? nullptr : dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (library == nullptr)
      throw base::EnvironmentError("libmpi.so is not loaded in this process (linked without MPI?)");
    MpiApi t{};
    resolve(library, "MPI_Initialized", path, t.initialized);
    resolve(library, "MPI_Init_thread", path, t.init_thread);
    resolve(library, "MPI_Finalize", path, t.finalize);
    resolve(library, "MPI_Comm_set_errhandler", path, t.comm_set_errhandler);
    resolve(library, "MPI_Comm_rank", path, t.comm_rank);
    resolve(library, "MPI_Comm_size", path, t.comm_size);
    resolve(library, "MPI_Allgather", path, t.allgather);
    resolve(library, "MPI_Allgatherv", path, t.allgatherv);
    resolve(library, "MPI_Error_string", path, t.error_string);
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
    check_mpi(api().comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
              "MPI_Comm_set_errhandler");
    check_mpi(api().comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(api().comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> allgather(const std::string& mine) const override {
    ORRERY_CHECK(mine.size() <= static_cast<size_t>(INT_MAX),
                 "one rank's evaluations exceed 2 GiB");
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    check_mpi(api().allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
              "MPI_Allgather");
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<size_t>(r)] = static_cast<int>(total);
      total += lengths[static_cast<size_t>(r)];
      ORRERY_CHECK(total <= INT_MAX, "the gathered evaluations exceed 2 GiB");
    }
    std::string all(static_cast<size_t>(total), '\0');
    check_mpi(api().allgatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(),
                               offsets.data(), MPI_BYTE, MPI_COMM_WORLD),
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
