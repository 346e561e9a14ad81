#!/usr/bin/env bash
# The second half of the single-GPU experiment (scripts/gpu_experiment.sh wrote EXP): calibrates the
# simulator on the t* runs' traces, predicts every run with and without the profile, and prints
# the table of docs/calibration.md ("On a GPU"): measured step, predicted step and error per plan,
# the held-out error and Kendall's tau. Needs a full build (the simulator).
#
#   ORRERY=build/cli/orrery bash scripts/gpu_calibrate.sh EXP
set -euo pipefail

ORRERY=${ORRERY:-build/cli/orrery}
exp=${1:?usage: gpu_calibrate.sh EXP_DIR}
train=()
for d in "$exp"/t*/; do [ -f "$d/trace.json" ] && train+=("$d/trace.json"); done
if [ ${#train[@]} -eq 0 ]; then
  echo "error: $exp has no t*/trace.json (run scripts/gpu_experiment.sh first)" >&2
  exit 2
fi
"$ORRERY" calibrate --traces "${train[@]}" --out "$exp/profile.yaml" > "$exp/calibrate.txt"

# One line per run: set (train, test, or mfu for the MFU run, which is predicted like the held-out
# plans but kept out of their statistics), plan, measured step, its range over the measured steps,
# predicted with and without the profile.
field() { grep -m1 "\"$1\"" | sed 's/.*: *//; s/,$//'; }
runs="$exp/runs.tsv"
printf 'set\tplan\tmeasured_s\tlow_s\thigh_s\tpredicted_s\tuncalibrated_s\n' > "$runs"
for d in "$exp"/t*/ "$exp"/h*/ "$exp"/mfu*/; do
  f="$d/trace.json"
  [ -f "$f" ] || continue
  name=$(basename "$d")
  case "$name" in t*) set=train ;; h*) set=test ;; *) set=mfu ;; esac
  cal=$("$ORRERY" validate --trace "$f" --calibration "$exp/profile.yaml" --json)
  raw=$("$ORRERY" validate --trace "$f" --json)
  "$ORRERY" validate --trace "$f" --calibration "$exp/profile.yaml" > "$exp/$name.validate.txt"
  # The measured steps (all but the first, as measured_step_s): their range.
  steps=$(grep -m1 '"step_seconds"' "$f" | sed 's/.*\[//; s/\].*//' | tr -d ' ' | tr ',' '\n' | tail -n +2 | sort -g)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$set" "$name" "$(field measured_step_s <<<"$cal")" \
    "$(head -1 <<<"$steps")" "$(tail -1 <<<"$steps")" "$(field predicted_step_s <<<"$cal")" \
    "$(field predicted_step_s <<<"$raw")" >> "$runs"
done

awk -F'\t' '
  NR == 1 { next }
  { n++; s[n] = $1; name[n] = $2; m[n] = $3; lo[n] = $4; hi[n] = $5; p[n] = $6; raw[n] = $7 }
  function tau(only,   i, j, c, d) {
    c = 0; d = 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
      if (s[i] != only || s[j] != only) continue
      if ((m[i] - m[j]) * (p[i] - p[j]) > 0) c++; else d++
    }
    return c + d > 0 ? (c - d) / (c + d) : 0
  }
  END {
    print "| set | plan | measured | range over steps | predicted (calibrated) | error | predicted (defaults) | error |"
    print "|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      e = p[i] / m[i] - 1; ae = e < 0 ? -e : e
      printf "| %s | %s | %.4f s | %.4f-%.4f s | %.4f s | %+.1f%% | %.4f s | %+.1f%% |\n", s[i], name[i], m[i], lo[i], hi[i], p[i], 100 * e, raw[i], 100 * (raw[i] / m[i] - 1)
      if (s[i] == "test") { t++; sum += ae; if (ae > maxe) maxe = ae }
      if (s[i] == "train") { tr++; trsum += ae }
    }
    if (t > 0) printf "\nheld-out plans: %d, mean |error| %.1f%%, max |error| %.1f%%", t, 100 * sum / t, 100 * maxe
    if (tr > 0) printf "; training plans: mean |error| %.1f%%", 100 * trsum / tr
    printf "\nKendall tau, held-out plans: %.2f; training plans: %.2f\n", tau("test"), tau("train")
  }' "$runs" | tee "$exp/summary.md"
