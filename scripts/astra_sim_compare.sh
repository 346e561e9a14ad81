#!/usr/bin/env bash
# Runs an orrery Chakra export through ASTRA-sim's analytical (congestion-unaware) backend and
# prints both step times (docs/simulator.md, "Chakra export for ASTRA-sim", has the build of
# ASTRA-sim this was run with and the result). ASTRA-sim is not a dependency of orrery: build it
# yourself and pass its binary.
# Usage: scripts/astra_sim_compare.sh ASTRA_SIM_BINARY [WORK_DIR]
# (WORK_DIR, default a new temporary folder, receives the export, the configurations and the log.)
set -euo pipefail
cd "$(dirname "$0")/.."
astra="${1:?usage: scripts/astra_sim_compare.sh ASTRA_SIM_BINARY [WORK_DIR]}"
work="${2:-$(mktemp -d)}"
[[ -x "$astra" ]] || { echo "astra_sim_compare: $astra is not an executable" >&2; exit 2; }
mkdir -p "$work"
orrery=build/cli/orrery
[[ -x "$orrery" ]] || { echo "astra_sim_compare: build orrery first (scripts/build.sh)" >&2; exit 2; }

# One DGX H100 node, llama3-8b tp2 pp2 dp2: the plan docs/simulator.md reports.
"$orrery" simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 2 --pp 2 \
  --global-batch 16 --seq 2048 --engine des --chakra "$work/et" --json >"$work/orrery.json"

# The node as ASTRA-sim's analytical backend describes it: one switch of 8 NPUs, the NVSwitch's
# 450 GB/s per GPU and direction, NCCL's NVLink hop latency (0.6 us), as dgx-h100.yaml says.
cat >"$work/network.yml" <<'YAML'
topology: [ Switch ]
npus_count: [ 8 ]
bandwidth: [ 450.0 ]  # GB/s
latency: [ 600.0 ]  # ns
YAML
# Ring collectives (NCCL's choice on one node at these sizes), no memory expansion.
cat >"$work/system.json" <<'JSON'
{
  "scheduling-policy": "LIFO",
  "endpoint-delay": 10,
  "active-chunks-per-dimension": 1,
  "preferred-dataset-splits": 4,
  "all-reduce-implementation": ["ring"],
  "all-gather-implementation": ["ring"],
  "reduce-scatter-implementation": ["ring"],
  "all-to-all-implementation": ["direct"],
  "collective-optimization": "localBWAware",
  "local-mem-bw": 3350,
  "boost-mode": 0,
  "roofline-enabled": 0
}
JSON
echo '{"memory-type": "NO_MEMORY_EXPANSION"}' >"$work/memory.json"

"$astra" --workload-configuration="$work/et/trace" \
  --comm-group-configuration="$work/et/comm_groups.json" \
  --system-configuration="$work/system.json" --remote-memory-configuration="$work/memory.json" \
  --network-configuration="$work/network.yml" >"$work/astra-sim.log" 2>&1

# ASTRA-sim counts cycles of 1 ns; the step ends when its slowest rank finishes.
astra_ns=$(grep -o 'finished, [0-9]* cycles' "$work/astra-sim.log" | grep -o '[0-9]*' | sort -n | tail -1)
[[ -n "$astra_ns" ]] || { echo "astra_sim_compare: no rank finished; see $work/astra-sim.log" >&2; exit 1; }
orrery_s=$(grep -o '"step_time_s": [0-9.e+-]*' "$work/orrery.json" | head -1 | grep -o '[0-9.e+-]*$')
awk -v o="$orrery_s" -v a="$astra_ns" -v lf="$work/astra-sim.log" 'BEGIN {
  printf "orrery des   %8.1f ms\nASTRA-sim    %8.1f ms  (analytical, congestion-unaware; log: %s)\n",
    o * 1000, a / 1e6, lf }'
