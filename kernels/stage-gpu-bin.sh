#!/usr/bin/env bash
# Builds (here, where Rust is) the kolm-kernels test executables, the
# benchmarks and the runtime's two binaries (kolm-enclave, the supervisor,
# and kolm-jobs, the job binary it runs in its sandbox and finds beside
# itself: a sealed GPU fine-tune needs both) in release mode and copies
# them, with scripts/gpu-check.sh,
# scripts/train-check.sh and the PyTorch scripts of bench/, into DEST
# (default gpu-bin/; give a folder under target/ to keep it ignored by git),
# ready to carry to a GPU machine and run there with
# `bash gpu-bin/gpu-check.sh gpu-bin`.
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root
DEST=${1:-gpu-bin}
mkdir -p "$DEST"
# Release code without the release profile's LTO: the same kernels (they are
# compiled by NVRTC at run time anyway), a much shorter build.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
cargo build --release --locked -p kolm-kernels --bin kolm-kernels-bench --bin kolm-train-bench
cargo build --release --locked -p kolm-enclave --bin kolm-enclave -p kolm-jobs --bin kolm-jobs
cargo test --release --locked -p kolm-kernels --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, shutil, sys
dest = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if m["target"]["kind"][0] == "bin":
        continue
    kind = m["target"]["kind"][0]
    name = "kolm_kernels_unit" if kind == "lib" else m["target"]["name"]
    shutil.copy(m["executable"], f"{dest}/{name}")
    print("staged", name)
' "$DEST"
TARGET=${CARGO_TARGET_DIR:-target}
cp "$TARGET/release/kolm-kernels-bench" "$TARGET/release/kolm-train-bench" \
    "$TARGET/release/kolm-enclave" "$TARGET/release/kolm-jobs" "$DEST/"
cp scripts/gpu-check.sh scripts/train-check.sh scripts/cuda-env.sh \
    bench/torch_reference.py bench/torch_attention.py bench/torch_step.py "$DEST/"
# Symbols are not needed there, and the carried folder has a size limit.
strip "$DEST"/kolm_kernels_unit "$DEST"/nvrtc_compile "$DEST"/gpu "$DEST"/llama \
    "$DEST"/kolm-kernels-bench "$DEST"/kolm-train-bench "$DEST"/kolm-enclave "$DEST"/kolm-jobs
ls -la "$DEST"
