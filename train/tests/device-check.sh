#!/usr/bin/env bash
# Runs the GPU backend's checks on a GPU machine from binaries staged
# elsewhere (the GPU machine has no Rust and no network). Stage them where
# Rust is, from the repository root:
#
#   export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
#   bash train/tests/device-check.sh --stage target/device
#
# then on the GPU machine, from the repository root:
#
#   bash train/tests/device-check.sh target/device
#
# With the `run` tool, which copies the session's own checkout (not a
# helper's worktree): copy target/device/* and this script into an ignored
# folder of that checkout (e.g. target/device-gpu/), carry it, and run
# `bash target/device-gpu/device-check.sh target/device-gpu`.
#
# It runs kolm-train's tests/gpu.rs (`train_gpu`: f32 parity with the f64
# reference, full and LoRA; bf16 bitwise repeat and resume; the memory
# estimate against the measured use; the refusal; the environment record),
# kolm-kernels' tests/llama.rs (`llama`: the full fine-tune step, unchanged)
# and `kolm-train-bench --lora-rank 16` (tokens/s, LoRA rank 16 on every
# projection next to the full fine-tune). KOLM_REQUIRE_GPU=1: a missing GPU
# fails instead of skipping.
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
if [ "${1:-}" = "--stage" ]; then
    set -e
    DEST=${2:-target/device}
    mkdir -p "$DEST"
    TARGET=${CARGO_TARGET_DIR:-target}
    cargo build --release --offline -p kolm-kernels --bin kolm-train-bench
    for spec in "kolm-train gpu train_gpu" "kolm-kernels llama llama"; do
        set -- $spec
        exe=$(cargo test --release --offline -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
            python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"][0] == "test":
        print(m["executable"])' | tail -1)
        cp "$exe" "$DEST/$3"
    done
    cp "$TARGET/release/kolm-train-bench" scripts/cuda-env.sh "$DEST/"
    strip "$DEST/train_gpu" "$DEST/llama" "$DEST/kolm-train-bench"
    ls -la "$DEST"
    exit 0
fi
BIN=${1:-target/device}
OUT=${OUT:-/tmp/kolm-train-device}
mkdir -p "$OUT"
export KOLM_REQUIRE_GPU=1 KOLM_REQUIRE_NVRTC=1
# shellcheck source=scripts/cuda-env.sh
source "$BIN/cuda-env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
for t in train_gpu llama; do
    echo "== $t"
    "$BIN/$t" --nocapture --test-threads=1 >"$OUT/$t.log" 2>&1 || { status=1; echo "FAILED: $t (see $t.log)"; }
    grep -E "^RESULT|^memory|^refusal|^environment|SKIP|panicked|^test result" "$OUT/$t.log"
done
echo "== kolm-train-bench --lora-rank 16"
"$BIN/kolm-train-bench" --lora-rank 16 --steps 5 --warmup 2 --repeat 2 >"$OUT/bench.jsonl" 2>"$OUT/bench.err" || status=1
grep -E '"kolm_train_step"|"kolm_train_step_lora"' "$OUT/bench.jsonl"
grep -E "tokens/s|determinism|rror" "$OUT/bench.err"
exit $status
