#!/usr/bin/env bash
# The house style as errors (docs/development.md): clang-format on every C++ file git tracks, and
# clang-tidy (.clang-tidy: function size, a few bug patterns) on every compiled source of a
# configured build but the tests and generated code. Usage: scripts/lint.sh [build-dir]
# (default build/, which needs compile_commands.json: scripts/build.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"

mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.cu')
echo "lint: clang-format on ${#sources[@]} files" >&2
if ! clang-format --dry-run --Werror "${sources[@]}"; then
  echo "lint: clang-format: the files above are not formatted (run: clang-format -i FILE)" >&2
  exit 1
fi

if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "lint: $build/compile_commands.json is missing: configure first (scripts/build.sh)" >&2
  exit 1
fi
# Sources of the compile database that are ours: not tests, benchmarks or generated code (protoc's
# output, the embedded presets). Nor the executor's sources that include libtorch: clang-tidy 14
# (Debian 12's) cannot parse libtorch 1.13's headers as C++20 (c10::IValue is still incomplete
# where ivalue_inl.h copies it), so their function sizes are left to review.
root="$(pwd)/"
mapfile -t units < <(awk -v root="$root" '
  /"command":/ { torch = ($0 ~ /torch/) }
  /"file":/ {
    sub(/.*"file": "/, ""); sub(/".*/, ""); sub("^" root, "")
    if (!torch) print
  }' "$build/compile_commands.json" |
  grep -v -e '^tests/' -e '^bench/' -e '^build' -e '/gen/' -e '^/' | sort -u)
echo "lint: clang-tidy on ${#units[@]} translation units ($(nproc) at a time)" >&2
# One process per unit, run in parallel; -quiet keeps the output to the findings.
printf '%s\n' "${units[@]}" |
  xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" -quiet 2> >(grep -v "warnings generated" >&2)
echo "lint: ok" >&2
