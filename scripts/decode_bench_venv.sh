#!/usr/bin/env bash
# Creates (once) the benchmark-only venv with CTranslate2 for the decoding benchmark and prints
# its python. Called by bench/run.sh (make bench); setup.sh and make test do not need it.
# Idempotent: re-runs reuse the venv while scripts/requirements-decode-bench.txt is unchanged.
set -euo pipefail
venv="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/venv-decode-bench"
requirements="$(cd "$(dirname "$0")" && pwd)/requirements-decode-bench.txt"
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements-decode-bench.txt"; then
  echo "$venv/bin/python"
  exit 0
fi
echo "decode_bench_venv.sh: creating $venv" >&2
# The copy of the requirements, written last, marks a complete venv.
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$requirements" >&2
"$venv/bin/python" -c 'import ctranslate2, transformers, safetensors, tokenizers, torch, sentencepiece' >&2
cp "$requirements" "$venv/requirements-decode-bench.txt"
echo "$venv/bin/python"
