# Every external dependency, found once. All come from Debian packages (scripts/setup.sh);
# the CUDA toolkit and a CUDA libtorch are optional.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(Protobuf 3.12 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Boost 1.74 REQUIRED)  # Boost.Graph is header-only for what orrery uses
find_package(CLI11 REQUIRED)
pkg_check_modules(SimGrid REQUIRED IMPORTED_TARGET simgrid>=3.32)
pkg_check_modules(hwloc REQUIRED IMPORTED_TARGET hwloc)

if(ORRERY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(ORRERY_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# Optional: CUDA toolkit with NCCL (the executor's GPU path). The build works without it.
set(ORRERY_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")
if(EXISTS "${ORRERY_CUDA_ROOT}/include/nccl.h" AND EXISTS "${ORRERY_CUDA_ROOT}/include/cuda_runtime.h")
  set(ORRERY_HAVE_CUDA ON)
  message(STATUS "orrery: CUDA toolkit with NCCL found at ${ORRERY_CUDA_ROOT}")
else()
  set(ORRERY_HAVE_CUDA OFF)
  message(STATUS "orrery: no CUDA toolkit with NCCL at ${ORRERY_CUDA_ROOT}; GPU paths disabled")
endif()
