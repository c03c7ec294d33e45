#!/usr/bin/env bash
# Runs every ```sh block of README.md, in order, as written, in a scratch
# copy of the repository's tracked files (so the README's outputs under
# target/ start fresh, as on a clone, and nothing lands in this checkout).
#
# Each block runs under `bash -euo pipefail` with a time limit, from the
# scratch copy's root, after the blocks before it (what they wrote is
# there: a block may use an earlier block's outputs). A block's comment
# lines steer it:
#   # skip: WHY        not run here (WHY says who runs it: e.g. the test
#                      command, which .ci/run runs as its own step)
#   # needs: WHAT      needs something this machine may lack (gpu, assets,
#                      network, root): skipped, and said
#   # expect: exit N   the block must exit N (e.g. 1 for a SIMULATED
#                      verdict); any other status fails
#
# Usage: scripts/readme-check.sh [README.md]   (KOLM_README_BLOCK_LIMIT:
# seconds per block, default 1800; KOLM_README_SCRATCH: below). Exit 0 when every block that ran gave
# its expected status; 1 otherwise, naming the block and its first line.
# The cargo target directory stays this checkout's (CARGO_TARGET_DIR), so
# dependencies are not rebuilt; the README's `target/...` paths are the
# scratch copy's, with target/debug linked to the real one's binaries (so
# a rebuild of that directory by someone else between two blocks changes
# the enclave's measurement, and its receipt chain starts anew).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
readme=${1:-$repo/README.md}
limit=${KOLM_README_BLOCK_LIMIT:-1800}

# KOLM_README_SCRATCH=DIR: work in DIR (new or empty) and keep it, so a
# caller can check what the blocks wrote (.ci/run does); else a temporary
# directory, removed at the end.
if [ -n "${KOLM_README_SCRATCH:-}" ]; then
    scratch=$KOLM_README_SCRATCH
    mkdir -p "$scratch"
    if [ -n "$(ls -A "$scratch")" ]; then
        echo "readme-check: KOLM_README_SCRATCH=$scratch is not empty" >&2
        exit 2
    fi
else
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/kolm-readme.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
fi
work=$scratch/repo
mkdir -p "$work"
# The tracked files as they are in this checkout (uncommitted edits too).
(cd "$repo" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$repo" && xargs -0 cp --parents -t "$work" 2>/dev/null || true)
target=${CARGO_TARGET_DIR:-$repo/target}
mkdir -p "$target/debug" "$work/target"
ln -s "$target/debug" "$work/target/debug"
export CARGO_TARGET_DIR=$target
# The simulated TEE's roots of this run, not the installation's.
export KOLM_SIM_ROOT_DIR=$scratch/sim-root

# Split the README into blocks: blocks/N.sh, one per ```sh fence.
mkdir -p "$scratch/blocks"
awk -v dir="$scratch/blocks" '
    /^```sh[[:space:]]*$/ { n++; file = sprintf("%s/%03d.sh", dir, n); inblock = 1; printf "" > file; next }
    /^```/ && inblock { inblock = 0; close(file); next }
    inblock { print >> file }
' "$readme"

failed=0
ran=0
skipped=0
for block in "$scratch"/blocks/*.sh; do
    [ -e "$block" ] || continue
    first=$(grep -v '^[[:space:]]*#' "$block" | grep -m1 . || true)
    name="block $(basename "$block" .sh) ($first)"
    if why=$(grep -m1 -oP '^\s*#\s*(skip|needs):\s*\K.*' "$block"); then
        echo "readme-check: SKIP $name: $why"
        skipped=$((skipped + 1))
        continue
    fi
    expect=$(grep -m1 -oP '^\s*#\s*expect:\s*exit\s+\K[0-9]+' "$block" || echo 0)
    echo "readme-check: RUN $name (expect exit $expect)"
    set +e
    (cd "$work" && timeout --kill-after=10 "$limit" bash -euo pipefail "$block")
    rc=$?
    set -e
    ran=$((ran + 1))
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        echo "readme-check: FAIL $name: over its ${limit}s limit" >&2
        failed=1
    elif [ "$rc" != "$expect" ]; then
        echo "readme-check: FAIL $name: exit $rc, expected $expect" >&2
        failed=1
    fi
done
echo "readme-check: $ran blocks ran, $skipped skipped"
if [ "$ran" = 0 ]; then
    echo "readme-check: no \`\`\`sh block ran: nothing was checked" >&2
    exit 1
fi
exit "$failed"
