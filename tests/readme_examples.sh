#!/usr/bin/env bash
# Runs the README's "Examples" block as written, so an example that stops working fails CI.
# Each command runs in a fresh folder laid out like a build of a clone (build/cli/orrery is the
# binary under test; the repository's validation/ data is linked in), in the README's order, so
# a later example may use what an earlier one wrote (`topo show ... > my-cluster.yaml`). A command
# fails the test by a non-zero status or by printing nothing.
# Usage: tests/readme_examples.sh ROOT ORRERY
set -euo pipefail
root="$1"
orrery="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/cli"
ln -s "$orrery" "$work/build/cli/orrery"
ln -s "$root/validation" "$work/validation"

# The first sh block after the line starting "Examples"; backslash continuations joined.
mapfile -t commands < <(awk '
  /^Examples/ { want = 1; next }
  want && /^```sh/ { inside = 1; next }
  inside && /^```/ { exit }
  inside && /^#/ { next }  # a comment line of the block
  inside {
    line = $0
    if (sub(/\\$/, "", line)) { pending = pending line; next }
    print pending line; pending = ""
  }' "$root/README.md")
if ((${#commands[@]} == 0)); then
  echo "readme_examples: no \"Examples\" block with a sh code fence in $root/README.md" >&2
  exit 1
fi

cd "$work"
for c in "${commands[@]}"; do
  echo "\$ $c"
  out="$(bash -o pipefail -c "$c" 2>&1)" || {
    echo "readme_examples: failed (status $?): $c" >&2
    echo "$out" | tail -20 >&2
    exit 1
  }
  # A command that redirects its output leaves the file to check instead.
  target="$(sed -n 's/.*> *\([^ ]*\).*/\1/p' <<<"${c%%#*}")"
  if [[ -n "$target" ]]; then
    [[ -s "$target" ]] || { echo "readme_examples: $target is empty after: $c" >&2; exit 1; }
  elif [[ -z "$out" ]]; then
    echo "readme_examples: printed nothing: $c" >&2
    exit 1
  fi
done
echo "readme_examples: ${#commands[@]} commands ran"
