#!/usr/bin/env bash
# The single-GPU experiment (docs/calibration.md, "On a GPU"): trains a ~1B model for its MFU and
# eight single-GPU plans of two GPT/Llama models with `orrery run --out`, one measured trace each.
# Calibrating on four of them and predicting the other four happens afterwards, anywhere a full
# build is (scripts/gpu_calibrate.sh); this machine needs only an executor-only build with a CUDA
# libtorch (docs/executor.md, "On a GPU").
#
#   ORRERY=build-gpu/cli/orrery bash scripts/gpu_experiment.sh OUT_DIR
#
# CLUSTER (default scripts/gpu/h200-1gpu.yaml) names the one-GPU cluster the traces record; STEPS
# (default 6) steps per plan, the first one left out of the measured means as warm-up;
# PLAN_TIMEOUT (seconds, default 120) bounds each run; ONLY (a shell pattern) runs only the plans
# whose names match it. A plan whose OUT_DIR/NAME/trace.json exists is not run again, so a second
# call finishes what a first one left undone.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ORRERY=${ORRERY:-build-gpu/cli/orrery}
CLUSTER=${CLUSTER:-$here/gpu/h200-1gpu.yaml}
STEPS=${STEPS:-6}
PLAN_TIMEOUT=${PLAN_TIMEOUT:-120}
out=${1:?usage: gpu_experiment.sh OUT_DIR}
mkdir -p "$out"
failed=0

# run NAME ARGS...: one plan, bf16, seed 1; its log beside its directory.
run() {
  local name=$1
  shift
  # shellcheck disable=SC2053
  [[ $name == ${ONLY:-*} ]] || return 0
  if [ -f "$out/$name/trace.json" ]; then
    echo "== $name: measured already ($out/$name/trace.json)"
    return 0
  fi
  echo "== $name: $*"
  local status=0
  timeout "$PLAN_TIMEOUT" "$ORRERY" run --cluster "$CLUSTER" --precision bf16 --steps "$STEPS" --seed 1 \
    --out "$out/$name" --force "$@" > "$out/$name.log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "   failed (exit $status$([ "$status" -eq 124 ] && echo ", past PLAN_TIMEOUT")), see $out/$name.log"
    failed=$((failed + 1))
  fi
  tail -n 2 "$out/$name.log"
}

gpt="$here/gpu/gpt3-1.3b.yaml"  # GPT-3 XL without dropout (the executor runs none)

# The ~1B model at the usual pre-training shape: its MFU is the headline number.
run mfu-llama3.2-1b --model llama3.2-1b --seq 2048 --micro-batch 8 --global-batch 32
# Calibration set (t*) and held-out set (h*): sequence length, micro-batch, model and attention
# kernel vary across both; scripts/gpu_calibrate.sh fits on t* and predicts h*.
run t1-gpt1.3b-s2048-m1 --model "$gpt" --seq 2048 --micro-batch 1 --global-batch 4
run h1-gpt1.3b-s2048-m4 --model "$gpt" --seq 2048 --micro-batch 4 --global-batch 8
run t2-gpt1.3b-s1024-m8 --model "$gpt" --seq 1024 --micro-batch 8 --global-batch 8
run h2-llama1b-s4096-m1 --model llama3.2-1b --seq 4096 --micro-batch 1 --global-batch 4
run t3-llama1b-s2048-m4 --model llama3.2-1b --seq 2048 --micro-batch 4 --global-batch 8
run h3-llama1b-s1024-m8 --model llama3.2-1b --seq 1024 --micro-batch 8 --global-batch 16
run t4-gpt1.3b-s2048-m2-mat --model "$gpt" --seq 2048 --micro-batch 2 --global-batch 4 --attention materialized
run h4-gpt1.3b-s1024-m2-mat --model "$gpt" --seq 1024 --micro-batch 2 --global-batch 8 --attention materialized

echo "gpu_experiment: $failed run(s) failed"
exit $((failed > 0))
