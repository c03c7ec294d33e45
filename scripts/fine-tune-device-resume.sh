#!/usr/bin/env bash
# Issue 14 on the GPU machine: a sealed GPU fine-tune (shakespeare-lora)
# killed with SIGKILL after a checkpoint, resumed, and compared byte for
# byte with an uninterrupted run's artifact (scripts/fine-tune-device.sh
# leaves that one in OUT/lora). Usage: BIN INPUTS OUT (as that script).
set -uo pipefail
BIN=${1:?bin dir}; INPUTS=${2:?inputs dir}; OUT=${3:-/tmp/kolm-ft}
# shellcheck source=scripts/cuda-env.sh
source "$BIN/cuda-env.sh"
export KOLM_SIM_ROOT_DIR="$OUT/sim-root"
WHOLE=$(ls "$OUT"/lora/*.zip | head -1)
CK="$OUT/ckpt"; rm -rf "$CK" "$OUT/killed" "$OUT/resumed"
"$BIN/kolm-enclave" run --spec examples/shakespeare-lora/job.toml --input-dir "$INPUTS" \
    --policy examples/shakespeare-lora/policy.toml --out "$OUT/killed" --attest sim \
    --checkpoint-dir "$CK" >/dev/null 2>&1 &
pid=$!
until [ -d "$CK/steps/step-40" ] || ! kill -0 $pid 2>/dev/null; do sleep 0.05; done
kill -9 $pid; wait $pid 2>/dev/null
echo "killed after $(ls "$CK/steps" | tr '\n' ' ')"
ls "$OUT/killed"/*.zip 2>/dev/null && echo "UNEXPECTED: a killed run sealed something"
"$BIN/kolm-enclave" run --spec examples/shakespeare-lora/job.toml --input-dir "$INPUTS" \
    --policy examples/shakespeare-lora/policy.toml --out "$OUT/resumed" --attest sim \
    --checkpoint-dir "$CK" --resume >/dev/null 2>"$OUT/resumed.err"; echo "resumed exit $?"
RESUMED=$(ls "$OUT"/resumed/*.zip | head -1)
python3 - "$WHOLE" "$RESUMED" <<'PY'
import sys, zipfile
a, b = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2])
for n in ["outputs/model.safetensors", "outputs/adapter.safetensors", "outputs/train-log.jsonl", "outputs/lineage.json", "outputs/environment.json"]:
    print(n, "byte-equal" if a.read(n) == b.read(n) else "DIFFERS")
PY
