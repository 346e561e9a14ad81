#!/usr/bin/env bash
# The closed loop on this machine (docs/calibration.md, "End to end"): run ten plans of a small
# Llama-style model for real on the local CPU ranks, calibrate the simulator on five of them (and
# on `orrery bench`), and predict the other five, which calibration never sees.
# Usage: scripts/calibration_experiment.sh [OUT_DIR]   (default: build/calibration-experiment)
# Run it on a quiet machine: the measurements are wall-clock times.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh default >&2
orrery=build/cli/orrery
out="${1:-build/calibration-experiment}"
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "error: $out exists and is not empty; give another directory" >&2
  exit 2
fi
mkdir -p "$out"
model=scripts/calibration/small-llama.yaml
job=(--model "$model" --cluster local --global-batch 8 --seq 128 --steps 4 --seed 1)

# name, then the plan flags. The first five calibrate, the last five are predicted.
plans=(
  "dp1-mbs2|--dp 1 --micro-batch 2"
  "dp2|--dp 2 --micro-batch 1"
  "tp2|--tp 2 --dp 1 --micro-batch 2"
  "pp2-1f1b|--pp 2 --dp 1 --micro-batch 1 --schedule one_f_one_b"
  "dp2-zero1|--dp 2 --micro-batch 2 --sharding zero1"
  "dp1-mbs1|--dp 1 --micro-batch 1"
  "tp2-sp|--tp 2 --sp --dp 1 --micro-batch 1"
  "pp2-gpipe|--pp 2 --dp 1 --micro-batch 2 --schedule gpipe"
  "dp2-fsdp|--dp 2 --micro-batch 1 --sharding fsdp"
  "dp2-zero2-mbs4|--dp 2 --micro-batch 4 --sharding zero2"
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
for set in train test; do
  declare -n files="$set"
  "$orrery" validate --trace "${files[@]}" --calibration "$out/profile.yaml" > "$out/validate-$set.txt"
  "$orrery" validate --trace "${files[@]}" --calibration "$out/profile.yaml" --json > "$out/validate-$set.json"
  "$orrery" validate --trace "${files[@]}" > "$out/validate-$set-uncalibrated.txt"
done
echo "== held-out runs, calibrated" >&2
cat "$out/validate-test.txt"
