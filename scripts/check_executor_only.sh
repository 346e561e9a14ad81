#!/usr/bin/env bash
# The executor-only build (ORRERY_SIMULATOR=OFF; docs/executor.md, "On a GPU"), the one a GPU node
# without SimGrid and Ceres uses: builds it with the "executor-only" preset (into build-exec/) and
# checks that it trains a plan, writes the measured trace, and says which commands it left out.
# scripts/test.sh runs it after the tests so that this build cannot break unseen.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset executor-only >/dev/null
cmake --build --preset executor-only -- -j"$(nproc)"
bin=build-exec/cli/orrery
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "executor-only build: $1" >&2
  [ -f "$work/log" ] && cat "$work/log" >&2
  exit 1
}

# The simulator's commands are listed, and refuse with exit status 3 and the reason.
status=0
"$bin" simulate --model tiny --cluster local > "$work/log" 2>&1 || status=$?
[ "$status" -eq 3 ] || fail "orrery simulate exited $status, not 3"
grep -q "built without the simulator" "$work/log" || fail "orrery simulate did not say why it cannot run"

# `orrery run` trains, times every op under the simulator's node names, and reports its MFU.
"$bin" run --model tiny --cluster local --dp 1 --global-batch 2 --seq 16 --steps 2 --out "$work/run" > "$work/log" 2>&1 ||
  fail "orrery run failed"
grep -q "tokens/s, MFU" "$work/log" || fail "orrery run printed no throughput line"
[ -s "$work/run/trace.json" ] || fail "orrery run wrote no trace.json"
echo "executor-only build: simulate left out (exit 3), run trains and writes its trace"
