#!/usr/bin/env bash
# The sanitizer step meant for CI (not yet called by scripts/test.sh: docs/development.md,
# "Sanitizers and fuzzing in CI", says why): one clang build with AddressSanitizer + UBSan
# (preset "fuzz", into build-fuzz/, without libtorch) of the unit tests listed below and of the
# libFuzzer targets; then those tests, then every fuzz target for FUZZ_SECONDS (default 30) each.
# Prints the wall time of each part. Usage: scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The unit tests that run under the sanitizers: the modules every file passes through (formats
# and their readers, models, topologies). The simulator's, calibration's and the planner's tests
# are left out until their cost under ASan is measured (docs/development.md); the executor's need
# libtorch, and the cli tests start the `orrery` binary per case.
tests=(orrery_base_tests orrery_traces_tests orrery_models_tests orrery_topologies_tests)
bash scripts/setup.sh
step() { echo "sanitize: $1: $(($(date +%s) - t0)) s" >&2; }
t0=$(date +%s)
cmake --preset fuzz >/dev/null
mapfile -t fuzzers < <(cut -d' ' -f1 build-fuzz/tests/fuzz/fuzzers.txt)
cmake --build --preset fuzz -- -j"$(nproc)" "${tests[@]}" "${fuzzers[@]}"
step "build"
t0=$(date +%s)
regex="^($(IFS='|'; echo "${tests[*]}"))\\."
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" ctest --preset fuzz -j"$(nproc)" -R "$regex"
step "tests"
t0=$(date +%s)
bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
step "fuzzing"
