#!/usr/bin/env bash
# Runs every libFuzzer target of the "fuzz" preset (tests/fuzz/, docs/development.md#fuzzing) for
# SECONDS each, $(nproc) at a time, starting from its seed folders (read-only) and the corpus it
# grew before (build-fuzz/fuzz/corpus/TARGET/). A crash, a leak, a hang (over 10 s on one input)
# or an input needing over 2 GiB fails the run; the input is kept as
# build-fuzz/fuzz/findings/TARGET-crash-<sha1> (or leak-, timeout-, oom-) and the log as
# build-fuzz/fuzz/logs/TARGET.log. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# (the build must exist: scripts/build.sh fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
build=build-fuzz
list="$build/tests/fuzz/fuzzers.txt"
if [[ ! -f "$list" ]]; then
  echo "fuzz: $list not found; build the fuzz preset first (scripts/build.sh fuzz)" >&2
  exit 1
fi
mkdir -p "$build/fuzz/corpus" "$build/fuzz/findings" "$build/fuzz/logs"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

run_one() {  # NAME SEED_DIR...
  local name="$1"
  shift
  local corpus="$build/fuzz/corpus/$name" log="$build/fuzz/logs/$name.log"
  mkdir -p "$corpus"
  local start=$SECONDS
  if "$build/tests/fuzz/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$build/fuzz/findings/$name-" \
      "$corpus" "$@" >"$log" 2>&1; then
    echo "fuzz: $name: $((SECONDS - start)) s, $(find "$corpus" -type f | wc -l) corpus files," \
      "$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$') runs, no finding"
  else
    echo "fuzz: $name: FOUND a bug after $((SECONDS - start)) s; log $log:" >&2
    grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20 >&2
    return 1
  fi
}

status=0
pids=()
while read -r name seeds; do
  if (($# > 0)) && [[ " $* " != *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086  # seeds: space-separated folders
  run_one "$name" $seeds &
  pids+=($!)
  if ((${#pids[@]} >= $(nproc))); then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done <"$list"
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit "$status"
