#!/usr/bin/env bash
# Start-up of the `orrery` command: wall time of commands that do not train, and the heavy
# libraries each loads (docs/benchmarks.md, "Start-up"). Any orrery binary can be measured, so
# the same script gives the figures before and after a change:
#   bench/startup.sh [--runs N] [--check] [ORRERY]      (default build/cli/orrery)
# Prints one line per command: the medians over N runs (default 20) of wall time, CPU time (user
# + system: what the command itself costs, less disturbed by other load than wall time) and peak
# resident memory (GNU time), and the libtorch / MPI / SimGrid libraries the dynamic loader
# loaded (LD_DEBUG=files). --check (ctest `startup`, one run each) fails when one of those
# libraries is loaded; times are never asserted (docs/benchmarks.md: speed is measured, not
# tested).
set -euo pipefail
runs=20
check=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --check) check=1; shift ;;
    *) break ;;
  esac
done
bin=${1:-build/cli/orrery}
[ -x "$bin" ] || { echo "startup.sh: $bin is not an executable" >&2; exit 2; }

commands=(
  "--version"
  "model list"
  "topo list"
  "simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 8 --global-batch 8 --seq 2048"
)

median() { sort -n | sed -n "$(((runs + 1) / 2))p"; }
status=0
printf '%-32s %8s %8s %8s  %s\n' "orrery ..." "wall" "cpu" "rss" "heavy libraries loaded"
for c in "${commands[@]}"; do
  stats=$(mktemp)
  for ((i = 0; i < runs; i++)); do
    # shellcheck disable=SC2086  # the command's words
    /usr/bin/time -a -o "$stats" -f "%e %U %S %M" "$bin" $c >/dev/null
  done
  # Milliseconds of wall and of CPU (user + system), MiB of peak resident memory: medians.
  wall=$(awk '{printf "%d\n", $1 * 1000}' "$stats" | median)
  cpu=$(awk '{printf "%d\n", ($2 + $3) * 1000}' "$stats" | median)
  rss=$(awk '{printf "%d\n", $4 / 1024}' "$stats" | median)
  rm -f "$stats"
  # shellcheck disable=SC2086
  heavy=$(LD_DEBUG=files "$bin" $c 2>&1 >/dev/null |
    grep -oE 'file=(libtorch[^ ]*|libc10[^ ]*|libmpi[^ ]*|libsimgrid[^ ]*)' | sed 's/file=//' |
    sort -u | tr '\n' ' ' || true)
  printf '%-32s %5d ms %5d ms %4d MiB  %s\n' "${c%% --*}" "$wall" "$cpu" "$rss" "${heavy:-none}"
  if [ -n "$check" ]; then
    if [ -n "$heavy" ]; then
      echo "startup: orrery $c loads $heavy" >&2
      status=1
    fi
  fi
done
exit $status
