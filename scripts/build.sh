#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), configures and builds orrery with a CMake preset.
# Usage: scripts/build.sh [preset]   (default: "default", into build/)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
# Two jobs per core at most: the machine this targets has 2 cores and 24 GiB.
cmake --build --preset "$preset" -- -j"$(nproc)"
