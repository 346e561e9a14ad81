#!/usr/bin/env bash
# The README's test command: set-up, build, then every test (unit, bad-input corpora, CLI
# end-to-end, layering). Usage: scripts/test.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
bash scripts/build.sh "$preset"
# clang-format and clang-tidy (.clang-tidy) over the tree, as errors (docs/development.md).
case "$preset" in
  asan) build_dir=build-asan ;;
  *) build_dir=build ;;
esac
bash scripts/lint.sh "$build_dir"
ctest --preset "$preset" -j"$(nproc)"
# The executor-only build that GPU nodes use (no SimGrid, no Ceres) must build and train too.
bash scripts/check_executor_only.sh
# ASan + UBSan over the unit tests below the executor, then every libFuzzer target for 30 s
# (docs/development.md, "Sanitizers and fuzzing in CI"). Only for the default preset: the asan
# preset already ran every test under the sanitizers.
if [[ "$preset" == default ]]; then
  bash scripts/sanitize.sh
fi
