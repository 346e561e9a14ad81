#!/usr/bin/env bash
# The README's main command on built-in defaults: set-up, build, then show a preset model and a
# preset cluster sized to 16 nodes, check that cluster's fabric, and simulate the model's training
# on it with the plan of NVIDIA's public recipe (tp 4, pp 4, cp 2, vp 5, sequence parallelism).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >&2
orrery=build/cli/orrery
"$orrery" model show llama3-70b
echo
"$orrery" topo show dgx-h100 --nodes 16
echo
"$orrery" topo check dgx-h100 --nodes 16
echo
"$orrery" simulate --model llama3-70b --cluster dgx-h100 --nodes 16 --tp 4 --pp 4 --cp 2 --vp 5 \
  --sp --global-batch 256 --seq 8192 --sharding zero1 --overlap-grad-reduce --overlap-param-gather
