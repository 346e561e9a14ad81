#!/usr/bin/env bash
# The README's main command on built-in defaults: set-up, build, then show a preset model and a
# preset cluster sized to 16 nodes, and check that cluster's fabric.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >&2
orrery=build/cli/orrery
"$orrery" model show llama3-70b
echo
"$orrery" topo show dgx-h100 --nodes 16
echo
"$orrery" topo check dgx-h100 --nodes 16
