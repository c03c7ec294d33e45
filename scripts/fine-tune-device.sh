#!/usr/bin/env bash
# Issue 14 on the GPU machine, from binaries staged elsewhere (no Rust and
# no network there): the sealed shakespeare-lora fine-tune (real model, GPU,
# inside the sandbox) verified with the sim root and replayed; the sealed
# full fine-tune at the kolm-train-bench shape with its steady-state tokens/s;
# kolm-train-bench (full and LoRA r16) and PyTorch's step in the same call.
#
# Stage (where Rust is), from the repository root:
#   export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
#   cargo build --release --locked -p kolm-enclave -p kolm-jobs -p kolm-verify
#   bash train/tests/device-check.sh --stage target/device
#   cp $CARGO_TARGET_DIR/release/{kolm-enclave,kolm-jobs,kolm-verify} target/device/ && strip target/device/kolm-*
#   (kolm-enclave runs each job from kolm-jobs beside it)
#   cp bench/torch_step.py target/device/
#   bash examples/shakespeare-lora/stage-inputs.sh INPUTS   (the GGUF and plays)
# Run there: bash scripts/fine-tune-device.sh target/device INPUTS OUT
set -uo pipefail
BIN=${1:?bin dir}; INPUTS=${2:?inputs dir}; OUT=${3:-/tmp/kolm-ft}
mkdir -p "$OUT"
# shellcheck source=scripts/cuda-env.sh
source "$BIN/cuda-env.sh"
export KOLM_SIM_ROOT_DIR="$OUT/sim-root"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

zcat1() {  # one entry of a zip (no unzip needed)
    python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' "$1" "$2"
}

steady() {  # steady-state tokens/s from JSON progress lines (steps 6..N)
    python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train-step"' in l]
tokens_per_step = int(sys.argv[2])
a, b = rows[5], rows[-1]
print(f"steady-state {(b['step'] - a['step']) * tokens_per_step / (b['elapsed_s'] - a['elapsed_s']):.0f} tokens/s over steps {a['step']+1}..{b['step']}")
PY
}

echo "== sealed shakespeare-lora (GPU, bf16, LoRA r16, sandboxed)"
/usr/bin/time -v "$BIN/kolm-enclave" run --spec examples/shakespeare-lora/job.toml --input-dir "$INPUTS" \
    --policy examples/shakespeare-lora/policy.toml --out "$OUT/lora" --attest sim --json \
    >"$OUT/lora.jsonl" 2>"$OUT/lora.err"; rc=$?
echo "exit $rc"; tail -4 "$OUT/lora.err" | grep -v "^\s*$" | cut -c1-400
tail -1 "$OUT/lora.jsonl" | cut -c1-1500
steady "$OUT/lora.jsonl" $((16 * 512))
"$BIN/kolm-enclave" sim-root --out "$OUT/root.pem" 2>/dev/null
ZIP=$(ls "$OUT"/lora/*.zip 2>/dev/null | head -1)
if [ -n "$ZIP" ]; then
    "$BIN/kolm-verify" "$ZIP" --policy examples/shakespeare-lora/policy.toml --dangerous-trust-sim-root "$OUT/root.pem" --json \
        | python3 -c 'import json,sys; v=json.load(sys.stdin); print("verify:", v["verdict"]); print("gpu:", json.dumps(v.get("fields",{}).get("gpu")))'
    zcat1 "$ZIP" outputs/environment.json; echo
    zcat1 "$ZIP" manifest.json | python3 -c 'import json,sys; m=json.load(sys.stdin); print("manifest environment.gpu:", json.dumps(m["environment"]["gpu"])); print("sandbox:", json.dumps({k: m["environment"]["sandbox"][k] for k in ("profile","egress_blocked","blocked_total")}))'
    zcat1 "$ZIP" outputs/train-log.jsonl | python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin]; print("loss curve:", " ".join("%d:%.3f" % (x["step"], x["loss"]) for x in r if x["step"] in (1,5,10,20,30,40,50,60,100,150,200)))'
    echo "== replay"
    "$BIN/kolm-enclave" replay "$ZIP" --inputs "$INPUTS"; echo "replay exit $?"
else
    status=1
fi

[ "${ONLY_LORA:-0}" = 1 ] && exit $status
echo "== sealed full fine-tune at the bench shape (B=16, T=1024, bf16)"
"$BIN/kolm-enclave" run --spec examples/shakespeare-lora/full-bench.toml --input-dir "$INPUTS" \
    --policy examples/shakespeare-lora/policy.toml --out "$OUT/full" --attest sim --json \
    >"$OUT/full.jsonl" 2>"$OUT/full.err"; echo "exit $?"
tail -2 "$OUT/full.err" | cut -c1-300
steady "$OUT/full.jsonl" $((16 * 1024))
tail -1 "$OUT/full.jsonl" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d["metrics"].get(k) for k in ("train_tokens_per_s","train_peak_memory_bytes","perplexity","base_perplexity","k_score")})' 2>/dev/null

echo "== kolm-train-bench (same call)"
"$BIN/kolm-train-bench" --steps 10 --warmup 3 --repeat 2 2>&1 >/dev/null | grep -E "tokens/s|determinism" | head -4
"$BIN/kolm-train-bench" --lora-rank 16 --steps 10 --warmup 3 --repeat 2 2>&1 >/dev/null | grep -E "tokens/s|determinism|lora" | head -4
echo "== PyTorch anchor (same call)"
timeout 240 python3 "$BIN/torch_step.py" --modes eager,compile --recipes autocast 2>&1 | tail -6
exit $status
