#!/usr/bin/env bash
# OpenBLAS's own kernels against the ones orrery chooses (docs/executor.md, "CPU BLAS kernels"),
# side by side: `orrery bench` (fp32 GEMMs on one core) and small-llama at dp 2 (the calibration
# experiment's "dp2" plan), ROUNDS times each (default 2), interleaved so that a busy spell of a
# shared machine lands on both. "before" is OpenBLAS's choice given as OPENBLAS_CORETYPE=Prescott
# (a user's value, which orrery keeps; on a CPU OpenBLAS knows, pass BEFORE=<its choice>).
# Usage: scripts/blas_kernels_benchmark.sh OUT_DIR        (ORRERY=path/to/orrery, default build's)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/blas_kernels_benchmark.sh OUT_DIR}"
orrery="${ORRERY:-build/cli/orrery}"
before="${BEFORE:-Prescott}"
mkdir -p "$out"
job=(--model scripts/calibration/small-llama.yaml --cluster local --global-batch 8 --seq 128
     --steps 11 --seed 1 --dp 2 --micro-batch 1)

# name, then the environment prefix: "after" leaves OPENBLAS_CORETYPE to orrery.
run_pair() {
  local r=$1 name env
  for name in before after; do
    env=(env -u OPENBLAS_CORETYPE)
    [ "$name" = before ] && env=(env "OPENBLAS_CORETYPE=$before")
    echo "== round $r: $name, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "${env[@]}" "$orrery" bench --ranks 1 --json > "$out/bench.$name.$r.json"
    "${env[@]}" "$orrery" run "${job[@]}" --out "$out/dp2.$name.$r" > "$out/dp2.$name.$r.log" 2>&1
  done
}
for ((r = 1; r <= ${ROUNDS:-2}; r++)); do run_pair "$r"; done

# Per round and side: the kernels, the best GEMM and 512^3 against the core's peak, and dp 2's
# mean step time over steps 2-11.
python3 - "$out" "${ROUNDS:-2}" <<'EOF'
import json, sys, glob, os
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | kernels | best fp32 GEMM | GEMM 512^3 | small-llama dp 2 s/step | steps/s |")
print("|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for side in ("before", "after"):
        b = json.load(open(f"{out}/bench.{side}.{r}.json"))
        peak = b["peak_fp32_flops_per_s"]
        gemms = [op for op in b["compute"] if op["op"] == "gemm"]
        best = max(gemms, key=lambda op: op["flops_per_s"])
        sq = next(op for op in gemms if op["name"] == "gemm.512x512x512")
        steps = [json.load(open(f))["seconds"] for f in
                 sorted(glob.glob(f"{out}/dp2.{side}.{r}/step_*.json"))[1:]]
        s = sum(steps) / len(steps)
        print(f"| {r} {side} | {b['blas_kernels']} | {best['flops_per_s']/1e9:.1f} GFLOP/s "
              f"({100*best['flops_per_s']/peak:.1f}%, {best['name']}) | "
              f"{sq['flops_per_s']/1e9:.1f} GFLOP/s ({100*sq['flops_per_s']/peak:.1f}%) | "
              f"{s:.3f} | {1/s:.3f} |")
EOF
