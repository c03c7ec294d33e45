#!/usr/bin/env bash
# Measures the host memory of a sealed CPU fine-tune of the real model
# against the pre-flight estimate (train/src/memory.rs, estimate_host):
# runs examples/smollm2-cpu/job.toml through `kolm-enclave run` with
# train.batch, train.steps and train.seq_len replaced, under GNU time, and
# prints one line: batch, seq_len, steps, the admitted estimate (with its
# margin, from the artifact's metrics), the peak RSS of the job (the
# largest maxrss among the supervisor's waited-for descendants: the job
# process), their ratio, and the wall time. docs/PERFORMANCE.md, "CPU
# memory", has the figures.
#
#   cargo build --locked -p kolm-enclave --bins
#   bash scripts/fetch-assets.sh
#   bash examples/smollm2-cpu/stage-inputs.sh target/smollm2-cpu-inputs
#   bash bench/measure-cpu-memory.sh target/smollm2-cpu-inputs 1 3 256
#   bash bench/measure-cpu-memory.sh target/smollm2-cpu-inputs 2 3 256
set -euo pipefail
INPUTS=${1:?usage: measure-cpu-memory.sh INPUT_DIR BATCH [STEPS] [SEQ_LEN]}
BATCH=${2:?batch}
STEPS=${3:-3}
SEQ=${4:-256}
BIN=${KOLM_ENCLAVE:-target/debug/kolm-enclave}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kolm-cpu-mem.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
sed -e "s/^batch = .*/batch = $BATCH/" -e "s/^steps = .*/steps = $STEPS/" \
    -e "s/^seq_len = .*/seq_len = $SEQ/" -e "s/^warmup_steps = .*/warmup_steps = 1/" \
    "$ROOT/examples/smollm2-cpu/job.toml" >"$WORK/job.toml"
# A policy without quality gates: this measures memory, not quality.
sed -n '/^\[\[quality/q;p' "$ROOT/examples/smollm2-cpu/policy.toml" >"$WORK/policy.toml"
/usr/bin/time -f '%M %e' -o "$WORK/time" "$BIN" run --attest none --spec "$WORK/job.toml" \
    --input-dir "$INPUTS" --policy "$WORK/policy.toml" --out "$WORK/out" --json \
    >"$WORK/summary.json"
read -r RSS_KB WALL <"$WORK/time"
ZIP=$(find "$WORK/out" -name '*.zip' | head -1)
EST=$(python3 - "$ZIP" <<'PYEOF'
import json, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith("metrics.json"))
    print(int(json.loads(z.read(name))["train_memory_estimate_bytes"]))
PYEOF
)
python3 - "$BATCH" "$SEQ" "$STEPS" "$EST" "$RSS_KB" "$WALL" <<'PYEOF'
import sys
b, t, s, est, rss_kb, wall = sys.argv[1:]
est, rss = int(est), int(rss_kb) * 1024
g = 1 << 30
print(f"batch {b} seq_len {t} steps {s}: estimate {est/g:.2f} GiB, peak RSS {rss/g:.2f} GiB "
      f"({rss_kb} KiB), "
      f"estimate/peak {est/rss:.3f}, wall {float(wall):.0f} s")
PYEOF
