#!/usr/bin/env bash
# The closed loop on this machine (docs/calibration.md, "End to end"): run ten plans of a small
# Llama-style model for real on the local CPU ranks, calibrate the simulator on five of them (and
# on `orrery bench`), and predict the other five, which calibration never sees.
# Usage: scripts/calibration_experiment.sh [OUT_DIR]   (default: build/calibration-experiment)
# Run it on a quiet machine: the measurements are wall-clock times.
set -euo pipefail
cd "$(dirname "$0")/.."
# ORRERY=path/to/orrery uses that binary instead of building build/cli/orrery.
if [ -z "${ORRERY:-}" ]; then bash scripts/build.sh default >&2; fi
orrery="${ORRERY:-build/cli/orrery}"
out="${1:-build/calibration-experiment}"
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "error: $out exists and is not empty; give another directory" >&2
  exit 2
fi
mkdir -p "$out"
model=scripts/calibration/small-llama.yaml
job=(--model "$model" --cluster local --global-batch 8 --seq 128 --steps 11 --seed 1)

# name, then the plan flags. The first five calibrate, the last five are predicted.
plans=(
  "dp1-mbs2|--dp 1 --micro-batch 2"
  "dp2|--dp 2 --micro-batch 1"
  "tp2|--tp 2 --dp 1 --micro-batch 2"
  "pp2-1f1b|--pp 2 --dp 1 --micro-batch 1 --schedule one_f_one_b"
  "dp2-zero1-overlap|--dp 2 --micro-batch 2 --sharding zero1 --overlap-grad-reduce --overlap-param-gather"
  "dp1-mbs1|--dp 1 --micro-batch 1"
  "tp2-sp|--tp 2 --sp --dp 1 --micro-batch 1"
  "pp2-gpipe|--pp 2 --dp 1 --micro-batch 2 --schedule gpipe"
  "dp2-fsdp|--dp 2 --micro-batch 1 --sharding fsdp"
  "dp2-zero2-mbs4-overlap|--dp 2 --micro-batch 4 --sharding zero2 --overlap-grad-reduce"
)

echo "== bench" >&2
"$orrery" bench --out "$out/bench.json" > "$out/bench.txt"
train=() test=()
for i in "${!plans[@]}"; do
  name="${plans[$i]%%|*}"
  flags="${plans[$i]#*|}"
  echo "== run $name: $flags" >&2
  # shellcheck disable=SC2086
  "$orrery" run "${job[@]}" $flags --out "$out/$name" > "$out/$name.log" 2>&1
  if [ "$i" -lt 5 ]; then train+=("$out/$name/trace.json"); else test+=("$out/$name/trace.json"); fi
done

echo "== calibrate on ${#train[@]} runs + bench" >&2
"$orrery" calibrate --traces "$out/bench.json" "${train[@]}" --out "$out/profile.yaml" > "$out/calibrate.txt"

# One line per run: set, name, measured and predicted step (seconds), with and without the profile.
field() { grep -m1 "\"$1\"" | sed 's/.*: *//; s/,$//'; }
summary="$out/summary.tsv"
printf 'set\tplan\tmeasured_s\tpredicted_s\terror\tuncalibrated_s\tuncalibrated_error\n' > "$summary"
for f in "${train[@]}" "${test[@]}"; do
  name=$(basename "$(dirname "$f")")
  set=train; for t in "${test[@]}"; do [ "$t" = "$f" ] && set=test; done
  cal=$("$orrery" validate --trace "$f" --calibration "$out/profile.yaml" --json)
  raw=$("$orrery" validate --trace "$f" --json)
  "$orrery" validate --trace "$f" --calibration "$out/profile.yaml" > "$out/$name.validate.txt"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$set" "$name" "$(field measured_step_s <<<"$cal")" \
    "$(field predicted_step_s <<<"$cal")" "$(field step_error <<<"$cal")" \
    "$(field predicted_step_s <<<"$raw")" "$(field step_error <<<"$raw")" >> "$summary"
done

# The table for docs/calibration.md, the held-out errors, and Kendall's tau between the measured
# and predicted orderings of the held-out runs (and of all ten).
awk -F'\t' '
  NR == 1 { print "| set | plan | measured | predicted (calibrated) | error | predicted (defaults) | error |"; print "|---|---|---|---|---|---|---|"; next }
  { printf "| %s | %s | %.3f s | %.3f s | %+.1f%% | %.3f s | %+.1f%% |\n", $1, $2, $3, $4, 100 * $5, $6, 100 * $7
    n++; m[n] = $3; p[n] = $4; s[n] = $1; e = $5 < 0 ? -$5 : $5
    if ($1 == "test") { t++; if (e > maxe) maxe = e; sum += e } }
  function tau(only,   i, j, c, d) {
    c = 0; d = 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
      if (only != "" && (s[i] != only || s[j] != only)) continue
      if ((m[i] - m[j]) * (p[i] - p[j]) > 0) c++; else d++
    }
    return (c - d) / (c + d)
  }
  END {
    printf "\nheld-out runs: %d, mean |error| %.1f%%, max |error| %.1f%%\n", t, 100 * sum / t, 100 * maxe
    printf "Kendall tau, held-out runs: %.2f; all runs: %.2f\n", tau("test"), tau("")
  }' "$summary" | tee "$out/summary.md"
