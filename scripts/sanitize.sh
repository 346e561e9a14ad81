#!/usr/bin/env bash
# CI's sanitizer step (scripts/test.sh calls it last; docs/development.md, "Sanitizers and fuzzing
# in CI", has its measured cost): one clang build with AddressSanitizer + UBSan
# (preset "fuzz", into build-fuzz/, without libtorch) of the unit tests listed below and of the
# libFuzzer targets; then those tests, then every fuzz target for FUZZ_SECONDS (default 30) each.
# Prints the wall time of each part. Usage: scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The unit tests that run under the sanitizers: every module below the executor and the command
# line (formats and their readers, models, topologies, the simulator's engines and cost models,
# calibration, goodput, validation, the planner). The executor's need libtorch (not in this
# build), and the cli tests start the `orrery` binary per case.
tests=(orrery_base_tests orrery_traces_tests orrery_models_tests orrery_topologies_tests
  orrery_sim_tests orrery_sim_collective_tests orrery_sim_goodput_tests orrery_sim_overlap_tests
  orrery_sim_fp8_tests orrery_sim_run_validation_tests orrery_sim_des_tests
  orrery_sim_calibration_tests orrery_planner_tests orrery_planner_spread_tests)
bash scripts/setup.sh
step() { echo "sanitize: $1: $(($(date +%s) - t0)) s" >&2; }
t0=$(date +%s)
cmake --preset fuzz >/dev/null
mapfile -t fuzzers < <(cut -d' ' -f1 build-fuzz/tests/fuzz/fuzzers.txt)
cmake --build --preset fuzz -- -j"$(nproc)" "${tests[@]}" "${fuzzers[@]}"
step "build"
t0=$(date +%s)
regex="^($(IFS='|'; echo "${tests[*]}"))\\."
# hwloc dlopens its plugins (libxml2, OpenCL, GL, PCI) and unloads them when a topology is
# destroyed; LeakSanitizer then reports about 1 KiB allocated inside an unloaded plugin, which no
# suppression can name. Topology discovery is tested without the plugins here (the default build's
# tests load them).
HWLOC_PLUGINS_PATH=/nonexistent UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  ctest --preset fuzz -j"$(nproc)" -R "$regex"
step "tests"
t0=$(date +%s)
bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
step "fuzzing"
