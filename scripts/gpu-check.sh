#!/usr/bin/env bash
# Runs every GPU test and the benchmarks on a GPU machine, from binaries
# built elsewhere (the GPU machine has no Rust): nothing is built here.
# Prints a short table last.
#
# Usage: scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
#   BIN_DIR holds `gpu`, `llama`, `nvrtc_compile`, `kolm_kernels_unit` (the
#   test executables), `kolm-kernels-bench` and `kolm-train-bench`;
#   kernels/stage-gpu-bin.sh puts them in gpu-bin/ with these scripts and
#   bench/torch_reference.py, bench/torch_attention.py, bench/torch_step.py.
#   In order: the four test binaries; `kolm-kernels-bench` and
#   bench/torch_reference.py (the kernel table: kolm, PyTorch, the floor);
#   on a compute capability 9.0 GPU, `kolm-kernels-bench --only attention
#   --attention mma-sync` and bench/torch_attention.py (attention on both
#   kernel families beside PyTorch SDPA flash); then scripts/train-check.sh
#   (the whole training step, kolm and PyTorch).
#   KOLM_GPU_CHECK_TRAIN=0 skips train-check.sh; its own variables are
#   described there.
set -uo pipefail
BIN=${1:-gpu-bin}
OUT=${2:-${OUT:-/tmp/kolm-gpu-out}}
mkdir -p "$OUT"
export KOLM_REQUIRE_GPU=1 KOLM_REQUIRE_NVRTC=1

# shellcheck source=scripts/cuda-env.sh
source "$BIN/cuda-env.sh"

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader

status=0
for t in kolm_kernels_unit nvrtc_compile gpu llama; do
    echo "== $t"
    if ! "$BIN/$t" --nocapture --test-threads=1 >"$OUT/$t.log" 2>&1; then
        status=1
        echo "FAILED: $t (see $t.log)"
        grep -E "panicked|FAIL" "$OUT/$t.log" | head -20
    fi
    grep -E "^test result|SKIP" "$OUT/$t.log"
done

echo "== bench"
# Both programs' stderr go to one bench.err.
if "$BIN/kolm-kernels-bench" >"$OUT/kolm-bench.jsonl" 2>"$OUT/bench.err"; then
    cat "$OUT/bench.err"
    PYTHONUNBUFFERED=1 python3 "$BIN/torch_reference.py" "$OUT/kolm-bench.jsonl" "$OUT/torch-bench.jsonl" \
        >"$OUT/table.txt" 2>>"$OUT/bench.err" || { status=1; tail -20 "$OUT/bench.err"; }
else
    status=1
    tail -20 "$OUT/bench.err"
fi

# Attention alone on the other kernel family of a Hopper GPU, and PyTorch
# SDPA flash timed once more beside both.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
if [ "$cc" = "9.0" ] && [ -s "$OUT/kolm-bench.jsonl" ]; then
    echo "== attention (mma.sync)"
    if "$BIN/kolm-kernels-bench" --only attention --attention mma-sync \
        >"$OUT/kolm-attn-mma.jsonl" 2>>"$OUT/bench.err"; then
        PYTHONUNBUFFERED=1 python3 "$BIN/torch_attention.py" wgmma="$OUT/kolm-bench.jsonl" \
            mma.sync="$OUT/kolm-attn-mma.jsonl" >"$OUT/attention.txt" 2>>"$OUT/bench.err" ||
            { status=1; tail -20 "$OUT/bench.err"; }
    else
        status=1
        tail -20 "$OUT/bench.err"
    fi
fi

if [ "${KOLM_GPU_CHECK_TRAIN:-1}" = 1 ]; then
    bash "$BIN/train-check.sh" "$BIN" "$OUT" >"$OUT/train.txt" 2>&1 || status=1
fi

echo
echo "== GPU test results"
grep -h "^RESULT" "$OUT/gpu.log" "$OUT/llama.log" | awk '{printf "%-12s %-34s %-5s %s %s\n", $2, $3, $4, $5, $NF}' | sort | uniq
echo "RESULT lines: $(cat "$OUT/gpu.log" "$OUT/llama.log" | grep -c '^RESULT'), failing: $(cat "$OUT/gpu.log" "$OUT/llama.log" | grep '^RESULT' | grep -c FAIL)"
echo
cat "$OUT/table.txt" 2>/dev/null
[ -f "$OUT/attention.txt" ] && { echo; cat "$OUT/attention.txt"; }
[ -f "$OUT/train.txt" ] && { echo; cat "$OUT/train.txt"; }
exit $status
