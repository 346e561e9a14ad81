#!/usr/bin/env bash
# Installs every Debian package orrery needs to build and test. Idempotent: when all packages are
# already present it asks dpkg only and returns in well under a second (no apt-get update).
set -euo pipefail

# Build tools and libraries, one line per reason they are here.
packages=(
  build-essential cmake ninja-build pkg-config git       # toolchain
  xz-utils                                                # tests: the GPU traces archive (tar -xJ)
  libprotobuf-dev protobuf-compiler                       # traces/: the interchange formats
  libyaml-cpp-dev nlohmann-json3-dev                      # traces/: YAML and JSON readers
  libboost-graph-dev                                      # topologies/: graph view, routing, max-flow
  libhwloc-dev                                            # topologies/: `orrery topo discover`
  libsimgrid-dev                                          # sim/: the discrete-event engine
  libceres-dev                                            # sim/: calibration fits (nonlinear least squares)
  libcli11-dev libfmt-dev                                 # cli/
  libopenmpi-dev openmpi-bin                              # planner/: `mpirun -np N orrery plan` (optional in CMake)
  libgtest-dev libgmock-dev libbenchmark-dev              # tests and benchmarks
  python3 python3-jsonschema                              # tests: --json outputs against docs/schema/
  pybind11-dev python3-dev                                # python/: the `orrery` Python module
  clang-format clang-tidy                                 # scripts/lint.sh: the house style as errors
  graphviz                                                # the README example of `orrery topo graph` (dot)
  clang libclang-rt-dev                                   # scripts/sanitize.sh: libFuzzer, ASan, UBSan
  chromium                                                # tests: the --html pages, rendered headless
)
if [[ "${ORRERY_SETUP_TORCH:-1}" == 1 ]]; then
  # executor/: libtorch (CPU) with Gloo process groups. Without OpenBLAS-OpenMP Debian's libtorch
  # falls back to reference BLAS, about 6x slower on GEMMs.
  packages+=(libtorch-dev libgloo-dev libopenblas0-openmp)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}" >&2
sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
