# Every external dependency, found once. All come from Debian packages (scripts/setup.sh);
# the CUDA toolkit and a CUDA libtorch are optional. With ORRERY_SIMULATOR=OFF (an executor-only
# build for a GPU node, docs/executor.md) SimGrid, Ceres, the tests and the benchmarks are not
# needed.
find_package(Threads REQUIRED)
find_package(Protobuf 3.12 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Boost 1.74 REQUIRED)  # Boost.Graph is header-only for what orrery uses
find_package(CLI11 REQUIRED)
# topologies/: `orrery topo discover` reads the machine with hwloc. Found by its header and library
# rather than pkg-config, which an executor-only build on a GPU node may not have.
find_path(ORRERY_HWLOC_INCLUDE_DIR hwloc.h)
find_library(ORRERY_HWLOC_LIBRARY hwloc)
if(NOT ORRERY_HWLOC_INCLUDE_DIR OR NOT ORRERY_HWLOC_LIBRARY)
  message(FATAL_ERROR "orrery: hwloc not found (hwloc.h and libhwloc; Debian: libhwloc-dev)")
endif()
add_library(orrery_hwloc INTERFACE IMPORTED)
target_include_directories(orrery_hwloc INTERFACE ${ORRERY_HWLOC_INCLUDE_DIR})
target_link_libraries(orrery_hwloc INTERFACE ${ORRERY_HWLOC_LIBRARY})

if(ORRERY_SIMULATOR)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(SimGrid REQUIRED IMPORTED_TARGET simgrid>=3.32)
  # sim/: calibration fits the cost models by nonlinear least squares (libceres-dev, with Eigen).
  find_package(Ceres 2.0 REQUIRED)
  # Ceres' dependencies (its own target, and SuiteSparse's through BLAS::BLAS and LAPACK::LAPACK)
  # link ATLAS's Fortran BLAS, libf77blas and libatlas, when libatlas is installed. In a binary that
  # runs libtorch too (`orrery bench`, `orrery run`) their sgemm_ would shadow OpenBLAS's for torch's
  # GEMMs as well. libblas.so.3 and liblapack.so.3 (OpenBLAS, through Debian's alternatives) serve
  # every BLAS and LAPACK call without them.
  foreach(target Ceres::ceres BLAS::BLAS LAPACK::LAPACK)
    if(TARGET ${target})
      get_target_property(orrery_libs ${target} INTERFACE_LINK_LIBRARIES)
      if(orrery_libs)
        list(FILTER orrery_libs EXCLUDE REGEX "libatlas|libf77blas")
        set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${orrery_libs}")
      endif()
    endif()
  endforeach()

  if(ORRERY_BUILD_TESTS)
    find_package(GTest REQUIRED)
  endif()
  if(ORRERY_BUILD_BENCHMARKS)
    find_package(benchmark REQUIRED)
  endif()
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
