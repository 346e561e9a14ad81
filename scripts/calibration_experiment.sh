#!/usr/bin/env bash
# The closed loop on this machine (docs/calibration.md, "End to end"): run ten plans of a small
# Llama-style model for real on the local CPU ranks, calibrate the simulator on five of them (and
# on `orrery bench`), and predict the other five, which calibration never sees.
# Usage: scripts/calibration_experiment.sh [OUT_DIR]   (default: build/calibration-experiment)
#        scripts/calibration_experiment.sh --analyze FROM_DIR OUT_DIR
# --analyze runs nothing: it calibrates and validates again on the bench file and the runs an
# earlier experiment left in FROM_DIR (its rounds, as many as it has), writing the profile, the
# reports and the table into OUT_DIR: the same measurements, predicted by this orrery.
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
from=""
if [ "${1:-}" = "--analyze" ]; then
  if [ $# -ne 3 ]; then
    echo "usage: $0 --analyze FROM_DIR OUT_DIR" >&2
    exit 2
  fi
  from="$2"
  shift 2
  if [ ! -f "$from/bench.json" ] || [ ! -d "$from/runs" ]; then
    echo "error: $from/bench.json or $from/runs is missing: --analyze needs an earlier experiment's directory" >&2
    exit 2
  fi
fi
out="${1:-build/calibration-experiment}"
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "error: $out exists and is not empty; give another directory" >&2
  exit 2
fi
mkdir -p "$out"
model=scripts/calibration/small-llama.yaml
job=(--model "$model" --cluster local --global-batch 8 --seq 128 --steps 11 --seed 1)

# name, then the plan flags. The first five calibrate, the last five are predicted. tp2 + SP
# calibrates because it issues collectives in line at two round counts (its all-gathers and
# reduce-scatters, one round on two ranks; the loss's all-reduces, two), from which the blocking
# overhead's parts per collective and per round are fitted (docs/calibration.md, "Blocking
# collectives"); tp2, whose in-line all-reduces are of a size no training run issues in line,
# is predicted.
plans=(
  "dp1-mbs2|--dp 1 --micro-batch 2"
  "dp2|--dp 2 --micro-batch 1"
  "tp2-sp|--tp 2 --sp --dp 1 --micro-batch 1"
  "pp2-1f1b|--pp 2 --dp 1 --micro-batch 1 --schedule one_f_one_b"
  "dp2-zero1-overlap|--dp 2 --micro-batch 2 --sharding zero1 --overlap-grad-reduce --overlap-param-gather"
  "dp1-mbs1|--dp 1 --micro-batch 1"
  "tp2|--tp 2 --dp 1 --micro-batch 2"
  "pp2-gpipe|--pp 2 --dp 1 --micro-batch 2 --schedule gpipe"
  "dp2-fsdp|--dp 2 --micro-batch 1 --sharding fsdp"
  "dp2-zero2-mbs4-overlap|--dp 2 --micro-batch 4 --sharding zero2 --overlap-grad-reduce"
)

# The host's CPU time (all CPUs, /proc/stat's clock ticks) as "total steal", and the fraction of
# it the hypervisor took (steal) between two such readings: a virtual machine's neighbours slow
# every op of a run without the run seeing why. "n/a" where /proc/stat has no steal column.
cpu_times() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, ($9 == "" ? -1 : $9); exit }' /proc/stat 2>/dev/null || echo "0 -1"; }
steal_fraction() {
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ")
    if (x[2] < 0 || y[1] <= x[1]) print "n/a"; else printf "%.4f\n", (y[2] - x[2]) / (y[1] - x[1]) }'
}

n=${#plans[@]}
train=() test=()
if [ -n "$from" ]; then
  # The earlier experiment's rounds: as many as every plan has.
  repeats=0
  while [ -f "$from/runs/${plans[0]%%|*}.$((repeats + 1))/trace.json" ]; do repeats=$((repeats + 1)); done
  if [ "$repeats" -eq 0 ]; then echo "error: $from/runs holds no round of ${plans[0]%%|*}" >&2; exit 2; fi
  for ((r = 1; r <= repeats; r++)); do
    for ((i = 0; i < n; i++)); do
      f="$from/runs/${plans[$i]%%|*}.$r/trace.json"
      if [ ! -f "$f" ]; then echo "error: $f is missing" >&2; exit 2; fi
      if [ "$i" -lt 5 ]; then train+=("$f"); else test+=("$f"); fi
    done
  done
  echo "== analyzing $repeats round(s) of $from" >&2
  bench="$from/bench.json"
  runs_dir="$from/runs"
else
  echo "== bench" >&2
  bench="$out/bench.json"
  runs_dir="$out/runs"
  mkdir -p "$runs_dir"
  "$orrery" bench --out "$bench" > "$out/bench.txt"
  repeats="${REPEATS:-5}"
  for ((r = 1; r <= repeats; r++)); do
    for ((k = 0; k < n; k++)); do
      i=$(( (k + (r - 1) * 3) % n ))  # round r starts three plans further on
      name="${plans[$i]%%|*}"
      flags="${plans[$i]#*|}"
      echo "== round $r/$repeats, run $name: $flags" >&2
      before=$(cpu_times)
      # shellcheck disable=SC2086
      "$orrery" run "${job[@]}" $flags --out "$runs_dir/$name.$r" > "$runs_dir/$name.$r.log" 2>&1 ||
        { echo "error: $name (round $r) failed, see $runs_dir/$name.$r.log" >&2; exit 1; }
      steal_fraction "$before" "$(cpu_times)" > "$runs_dir/$name.$r.steal"
      if [ "$i" -lt 5 ]; then train+=("$runs_dir/$name.$r/trace.json"); else test+=("$runs_dir/$name.$r/trace.json"); fi
    done
  done
fi

echo "== calibrate on ${#train[@]} runs + bench" >&2
"$orrery" calibrate --traces "$bench" "${train[@]}" --out "$out/profile.yaml" > "$out/calibrate.txt"

# One line per run: set, plan, round, measured and predicted step (seconds), with and without the
# profile (the predictions are the same for every round of a plan), and the host's steal during it.
field() { grep -m1 "\"$1\"" | sed 's/.*: *//; s/,$//'; }
runs="$out/runs.tsv"
printf 'set\tplan\tround\tmeasured_s\tpredicted_s\tuncalibrated_s\tsteal\n' > "$runs"
for i in "${!plans[@]}"; do
  name="${plans[$i]%%|*}"
  set=train; [ "$i" -ge 5 ] && set=test
  for ((r = 1; r <= repeats; r++)); do
    f="$runs_dir/$name.$r/trace.json"
    cal=$("$orrery" validate --trace "$f" --calibration "$out/profile.yaml" --json)
    raw=$("$orrery" validate --trace "$f" --json)
    [ "$r" -eq 1 ] && "$orrery" validate --trace "$f" --calibration "$out/profile.yaml" > "$out/$name.validate.txt"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$set" "$name" "$r" "$(field measured_step_s <<<"$cal")" \
      "$(field predicted_step_s <<<"$cal")" "$(field predicted_step_s <<<"$raw")" "$(cat "$runs_dir/$name.$r.steal" 2>/dev/null || echo n/a)" >> "$runs"
  done
done

# The table for docs/calibration.md (per plan: the median measured step over its rounds, their
# range, and the interval the median lies in), the held-out errors, and Kendall's tau between the
# measured and predicted orderings of the held-out plans (and of all ten). The interval is
# distribution-free: with n rounds sorted, [x(k), x(n+1-k)] holds the true median with probability
# 1 - 2 P(Binomial(n, 1/2) <= k - 1), and k is the largest that keeps it at 90% or more; a
# prediction inside it cannot be told from the measurement by these rounds.
awk -F'\t' '
  function sort(list, a,   k, i, j, v) {
    k = split(list, a, " ")
    for (i = 2; i <= k; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
    return k
  }
  function median(list,   a, k) { k = sort(list, a); return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
  # P(Binomial(n, 1/2) <= c)
  function binom_cdf(n, c,   i, p, t) { p = 0; t = 1; for (i = 0; i <= c; i++) { p += t; t = t * (n - i) / (i + 1) } return p / 2 ^ n }
  # The order statistic k of the median interval of n rounds (0: none reaches 90%), its confidence in conf_k.
  function interval_k(n,   k, best) {
    best = 0; conf_k = 0
    for (k = 1; 2 * k <= n; k++) if (1 - 2 * binom_cdf(n, k - 1) >= 0.9) { best = k; conf_k = 1 - 2 * binom_cdf(n, k - 1) }
    return best
  }
  NR == 1 { next }
  {
    if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2; s[n] = $1 }
    j = 0; for (q = 1; q <= n; q++) if (order[q] == $2) j = q
    meas[j] = meas[j] " " $4; p[j] = $5; raw[j] = $6
    if ($7 != "n/a" && $7 != "") { st[j] += $7; nst[j]++; st_all += $7; nst_all++; if ($7 > st_max) st_max = $7 }
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
    print "| set | plan | measured (median) | range over rounds | median within | predicted (calibrated) | error | predicted (defaults) | error | host steal |"
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      rounds = sort(meas[i], a); m[i] = median(meas[i]); e = p[i] / m[i] - 1; ae = e < 0 ? -e : e
      k = interval_k(rounds)
      if (k > 0) {
        lo = a[k]; hi = a[rounds + 1 - k]; within = sprintf("%.3f-%.3f s", lo, hi)
        inside = p[i] >= lo && p[i] <= hi; half = (hi - lo) / 2 / m[i]
      } else {
        within = "(too few rounds)"; inside = 0; half = -1
      }
      steal = nst[i] ? sprintf("%.1f%%", 100 * st[i] / nst[i]) : "n/a"
      printf "| %s | %s | %.3f s | %.3f-%.3f s | %s | %.3f s | %+.1f%%%s | %.3f s | %+.1f%% | %s |\n", s[i], order[i], m[i], a[1], a[rounds], within, p[i], 100 * e, inside ? " (inside)" : "", raw[i], 100 * (raw[i] / m[i] - 1), steal
      if (s[i] == "test") { t++; if (ae > maxe) maxe = ae; sum += ae; tin += inside; if (half >= 0) { hsum += half; hn++ } }
      else { tr++; trsum += ae }
    }
    printf "\nheld-out plans: %d, mean |error| %.1f%%, max |error| %.1f%%; training plans: mean |error| %.1f%%\n", t, 100 * sum / t, 100 * maxe, 100 * trsum / tr
    if (hn > 0)
      printf "held-out plans predicted inside the interval their measured median lies in (%.0f%% confidence, %d rounds): %d of %d; their mean half-width (the noise of a measured step): %.1f%%\n", 100 * conf_k, rounds, tin, t, 100 * hsum / hn
    printf "Kendall tau, held-out plans: %.2f; all plans: %.2f\n", tau("test"), tau("")
    if (nst_all > 0) printf "host steal (CPU time the hypervisor took) during the runs: mean %.1f%%, max %.1f%%\n", 100 * st_all / nst_all, 100 * st_max
  }' "$runs" | tee "$out/summary.md"
