#!/usr/bin/env bash
# Runs every GPU test and the kernel benchmark on a GPU machine, from
# binaries built elsewhere (the GPU machine has no Rust): nothing is built
# here. Prints a short table last.
#
# Usage: scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
#   BIN_DIR holds `gpu`, `llama`, `nvrtc_compile`, `kolm_kernels_unit` (the
#   test executables), `kolm-kernels-bench` and `kolm-train-bench`;
#   kernels/stage-gpu-bin.sh puts them in gpu-bin/ with these scripts and
#   bench/torch_reference.py, bench/torch_step.py.
#   After the kernel benchmark, scripts/train-check.sh times the whole
#   training step (skip with KOLM_GPU_CHECK_TRAIN=0).
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
# At most 8 files come back from a lent machine: both programs' stderr go to
# one bench.err.
if "$BIN/kolm-kernels-bench" >"$OUT/kolm-bench.jsonl" 2>"$OUT/bench.err"; then
    cat "$OUT/bench.err"
    PYTHONUNBUFFERED=1 python3 "$BIN/torch_reference.py" "$OUT/kolm-bench.jsonl" "$OUT/torch-bench.jsonl" \
        >"$OUT/table.txt" 2>>"$OUT/bench.err" || { status=1; tail -20 "$OUT/bench.err"; }
else
    status=1
    tail -20 "$OUT/bench.err"
fi

if [ "${KOLM_GPU_CHECK_LEGACY:-0}" = 1 ]; then
    # The kernels before cross-entropy again under the first timing method
    # (launch latency and the clearing write's dirty lines timed), to set
    # the two methods side by side; printed after the table.
    KOLM_BENCH_METHOD=legacy KOLM_BENCH_ONLY=small "$BIN/kolm-kernels-bench" 2>>"$OUT/bench.err" |
        python3 -c '
import json, sys
print("bench, legacy method (KOLM_BENCH_METHOD=legacy KOLM_BENCH_ONLY=small):")
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line)
        name, ms, mb = r["kernel"], r["ms"], r["bytes"] / 1e6
        print(f"{name:28s} {ms:9.4f} ms  {mb:7.1f} MB")
' >"$OUT/legacy.txt" || status=1
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
[ -f "$OUT/legacy.txt" ] && { echo; cat "$OUT/legacy.txt"; }
[ -f "$OUT/train.txt" ] && { echo; cat "$OUT/train.txt"; }
exit $status
