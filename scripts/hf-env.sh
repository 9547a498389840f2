#!/bin/sh
# hf-env.sh VENV: the Python environment `make test-hf` loads planc's exports
# in: Debian's CPU PyTorch (python3-torch 1.13.1, via `scripts/deps.sh hf`)
# and transformers with its pinned dependencies (tests/hf/requirements.txt)
# from PyPI, in a venv that sees Debian's packages (--system-site-packages).
# PyPI's torch wheels for Linux pull the CUDA stack (gigabytes); Debian's,
# with what it depends on, is 606 MiB installed (35 s here), the venv 163 MB
# (11 s from PyPI), measured 2026-12-02.
#
# Idempotent and offline-safe once installed: when VENV/.installed exists and
# the pinned versions import, it does nothing and needs no network. Without
# the network on a first install it fails, saying what it could not get.
set -eu

VENV=${1:?usage: scripts/hf-env.sh VENV}
HERE=$(cd "$(dirname "$0")/.." && pwd)
REQ="$HERE/tests/hf/requirements.txt"
PY=/usr/bin/python3     # Debian's interpreter: the one python3-torch is built for
WANT_TF=$(sed -n 's/^transformers==//p' "$REQ")

# The check that the environment is usable: torch and the pinned transformers
# import, and every architecture test-hf checks is there.
probe() {
    "$VENV/bin/python" - "$WANT_TF" <<'PY' 2>&1
import sys
import torch, transformers
from transformers import (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
                          GemmaForCausalLM, Gemma2ForCausalLM, MixtralForCausalLM, GPT2LMHeadModel)
if transformers.__version__ != sys.argv[1]:
    sys.exit(f"transformers {transformers.__version__}, expected {sys.argv[1]}")
print(f"torch {torch.__version__}, transformers {transformers.__version__}")
PY
}

if [ -f "$VENV/.installed" ] && probe >/dev/null; then
    exit 0
fi

"$HERE/scripts/deps.sh" hf || {
    echo "✗ hf-env: could not install Debian's python3-torch (scripts/deps.sh hf)" >&2; exit 1; }

rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV" || {
    echo "✗ hf-env: $PY -m venv failed (python3-venv: scripts/deps.sh hf)" >&2; exit 1; }
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" || {
    echo "✗ hf-env: could not install tests/hf/requirements.txt from PyPI into $VENV;" >&2
    echo "  test-hf needs transformers $WANT_TF (network, or a pip index: PIP_INDEX_URL)" >&2
    exit 1; }
if ! out=$(probe); then
    echo "✗ hf-env: the environment in $VENV does not work:" >&2
    echo "$out" >&2
    exit 1
fi
echo "$out" > "$VENV/.installed"
echo "hf-env: $out in $VENV ($(du -sh "$VENV" | cut -f1) beside Debian's torch)"
