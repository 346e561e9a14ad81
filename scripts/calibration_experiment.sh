#!/usr/bin/env bash
# The closed loop on this machine (docs/calibration.md, "End to end"): run ten plans of a small
# Llama-style model for real on the local CPU ranks, calibrate the simulator on five of them (and
# on `orrery bench`), and predict the other five, which calibration never sees.
# Usage: scripts/calibration_experiment.sh [OUT_DIR]   (default: build/calibration-experiment)
# Run it on a quiet machine: the measurements are wall-clock times. Each plan runs REPEATS times
# (default 5), the plans interleaved and their order rotated every round, so that a slow spell of
# the machine lands on several plans rather than on all runs of one; a plan's measured step is
# the median of its runs' (each itself the mean over the steps after the first that a clipped
# mean of the step times keeps).
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
mkdir -p "$out/runs"
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
repeats="${REPEATS:-5}"
n=${#plans[@]}
train=() test=()
for ((r = 1; r <= repeats; r++)); do
  for ((k = 0; k < n; k++)); do
    i=$(( (k + (r - 1) * 3) % n ))  # round r starts three plans further on
    name="${plans[$i]%%|*}"
    flags="${plans[$i]#*|}"
    echo "== round $r/$repeats, run $name: $flags" >&2
    # shellcheck disable=SC2086
    "$orrery" run "${job[@]}" $flags --out "$out/runs/$name.$r" > "$out/runs/$name.$r.log" 2>&1 ||
      { echo "error: $name (round $r) failed, see $out/runs/$name.$r.log" >&2; exit 1; }
    if [ "$i" -lt 5 ]; then train+=("$out/runs/$name.$r/trace.json"); else test+=("$out/runs/$name.$r/trace.json"); fi
  done
done

echo "== calibrate on ${#train[@]} runs + bench" >&2
"$orrery" calibrate --traces "$out/bench.json" "${train[@]}" --out "$out/profile.yaml" > "$out/calibrate.txt"

# One line per run: set, plan, round, measured and predicted step (seconds), with and without the
# profile (the predictions are the same for every round of a plan).
field() { grep -m1 "\"$1\"" | sed 's/.*: *//; s/,$//'; }
runs="$out/runs.tsv"
printf 'set\tplan\tround\tmeasured_s\tpredicted_s\tuncalibrated_s\n' > "$runs"
for i in "${!plans[@]}"; do
  name="${plans[$i]%%|*}"
  set=train; [ "$i" -ge 5 ] && set=test
  for ((r = 1; r <= repeats; r++)); do
    f="$out/runs/$name.$r/trace.json"
    cal=$("$orrery" validate --trace "$f" --calibration "$out/profile.yaml" --json)
    raw=$("$orrery" validate --trace "$f" --json)
    [ "$r" -eq 1 ] && "$orrery" validate --trace "$f" --calibration "$out/profile.yaml" > "$out/$name.validate.txt"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$set" "$name" "$r" "$(field measured_step_s <<<"$cal")" \
      "$(field predicted_step_s <<<"$cal")" "$(field predicted_step_s <<<"$raw")" >> "$runs"
  done
done

# The table for docs/calibration.md (per plan: the median measured step over its rounds and their
# range), the held-out errors, and Kendall's tau between the measured and predicted orderings of
# the held-out plans (and of all ten).
awk -F'\t' '
  function median(list,   a, k, i, j, v) {
    k = split(list, a, " ")
    for (i = 2; i <= k; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
  }
  NR == 1 { next }
  {
    if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2; s[n] = $1; lo[n] = $4; hi[n] = $4 }
    j = 0; for (q = 1; q <= n; q++) if (order[q] == $2) j = q
    meas[j] = meas[j] " " $4; p[j] = $5; raw[j] = $6
    if ($4 < lo[j]) lo[j] = $4
    if ($4 > hi[j]) hi[j] = $4
  }
  function tau(only,   i, j, c, d) {
    c = 0; d = 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
      if (only != "" && (s[i] != only || s[j] != only)) continue
      if ((m[i] - m[j]) * (p[i] - p[j]) > 0) c++; else d++
    }
    return (c - d) / (c + d)
  }
  END {
    print "| set | plan | measured (median) | range over rounds | predicted (calibrated) | error | predicted (defaults) | error |"
    print "|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      m[i] = median(meas[i]); e = p[i] / m[i] - 1; ae = e < 0 ? -e : e
      printf "| %s | %s | %.3f s | %.3f-%.3f s | %.3f s | %+.1f%% | %.3f s | %+.1f%% |\n", s[i], order[i], m[i], lo[i], hi[i], p[i], 100 * e, raw[i], 100 * (raw[i] / m[i] - 1)
      if (s[i] == "test") { t++; if (ae > maxe) maxe = ae; sum += ae } else { tr++; trsum += ae }
    }
    printf "\nheld-out plans: %d, mean |error| %.1f%%, max |error| %.1f%%; training plans: mean |error| %.1f%%\n", t, 100 * sum / t, 100 * maxe, 100 * trsum / tr
    printf "Kendall tau, held-out plans: %.2f; all plans: %.2f\n", tau("test"), tau("")
  }' "$runs" | tee "$out/summary.md"
