#!/usr/bin/env bash
# The composed training step on a GPU machine, from binaries built
# elsewhere (kernels/stage-gpu-bin.sh): kolm-train-bench (a timed
# SmolLM2-135M step, its per-op profile and its determinism check; on a
# compute capability 9.0 GPU once more with `--attention mma-sync`) and,
# when PyTorch is present, bench/torch_step.py on the same shape.
# scripts/gpu-check.sh calls this after the GPU tests (the composed step's
# parity tests are the `llama` test binary there).
#
# Usage: scripts/train-check.sh [BIN_DIR] [OUT_DIR]
#   KOLM_TRAIN_ARGS   extra flags for kolm-train-bench (its --help lists them)
#   KOLM_TORCH_MODES  bench/torch_step.py's --modes (default
#                     eager,deterministic,compile)
#   KOLM_TORCH_ARGS   other flags for bench/torch_step.py (e.g. --recipes)
#   KOLM_TORCH_TIMEOUT  seconds bench/torch_step.py may take (default 300)
set -uo pipefail
BIN=${1:-gpu-bin}
OUT=${2:-${OUT:-/tmp/kolm-gpu-out}}
mkdir -p "$OUT"
export KOLM_REQUIRE_GPU=1
# shellcheck source=scripts/cuda-env.sh
source "$BIN/cuda-env.sh"

status=0
echo "== kolm-train-bench"
"$BIN/kolm-train-bench" ${KOLM_TRAIN_ARGS:-} >"$OUT/train.jsonl" 2>"$OUT/train.err" || status=1
cat "$OUT/train.err"

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
if [ "$cc" = "9.0" ]; then
    echo "== kolm-train-bench --attention mma-sync"
    "$BIN/kolm-train-bench" ${KOLM_TRAIN_ARGS:-} --attention mma-sync \
        >"$OUT/train-mma.jsonl" 2>"$OUT/train-mma.err" || status=1
    grep -E "^(attention kernels|step|determinism)" "$OUT/train-mma.err"
fi

if [ -f "$BIN/torch_step.py" ] && python3 -c "import torch" 2>/dev/null; then
    echo "== PyTorch step (${KOLM_TORCH_MODES:-eager,deterministic,compile})"
    timeout "${KOLM_TORCH_TIMEOUT:-300}" python3 "$BIN/torch_step.py" \
        --modes "${KOLM_TORCH_MODES:-eager,deterministic,compile}" \
        ${KOLM_TORCH_ARGS:-} >"$OUT/torch-step.jsonl" 2>"$OUT/torch-step.err" || status=1
    tail -15 "$OUT/torch-step.err"
fi
exit $status
