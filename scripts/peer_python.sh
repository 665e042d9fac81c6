#!/usr/bin/env bash
# Prints the Python that runs the Hugging Face peers (the venv scripts/setup.sh made); exits 1 with
# a one-line hint when it is missing. Usage in tests: PY="$(scripts/peer_python.sh)".
venv="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/venv-test"
if [ -x "$venv/bin/python" ]; then echo "$venv/bin/python"; exit 0; fi
echo "peer_python.sh: $venv missing; run scripts/setup.sh" >&2
exit 1
