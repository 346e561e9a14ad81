#!/usr/bin/env bash
# The README's main command on built-in defaults: set-up, build, then plan llama3-70b on 16 DGX H100
# nodes (128 GPUs) with the sequence length of NVIDIA's public recipe (8192) and its two sequences
# per GPU (global batch 256), print the ranked plans, and simulate the winner in detail.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the `orrery` binary: the tests and benchmarks are scripts/test.sh's.
bash scripts/build.sh default orrery >&2
orrery=build/cli/orrery
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$orrery" plan --model llama3-70b --cluster dgx-h100 --nodes 16 --global-batch 256 --seq 8192 \
  --top 5 --out "$out/best-plan.yaml"
echo
echo "The winning plan, simulated in detail:"
"$orrery" simulate --plan "$out/best-plan.yaml"
