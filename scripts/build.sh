#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), configures and builds orrery with a CMake preset.
# Usage: scripts/build.sh [preset [target...]]   (default: "default", into build/; every target)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
# Two jobs per core at most: the machine this targets has 2 cores and 24 GiB.
cmake --build --preset "$preset" "${targets[@]}" -- -j"$(nproc)"
