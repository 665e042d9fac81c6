#!/usr/bin/env bash
# The Python package's test environment, made on demand by `make test-python`; `make test` and
# scripts/setup.sh never need it. Idempotent: a second run only checks. Prints the venv's python on
# stdout when it is in place (messages go to stderr).
#
# $ATTNKIT_CACHE/venv-py (default ~/.cache/attnkit/venv-py): a venv over Debian's /usr/bin/python3
# without system site packages, filled from scripts/requirements-bench.txt (PyTorch 2.15.0, the
# pinned torch of the benchmarks; pip's cache serves the files when venv-bench was made) and
# scripts/requirements-python-package.txt (transformers, pytest). Every file hash-checked.
# Redone when either file changes.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}"
VENV="$CACHE/venv-py"
REQUIREMENTS=(scripts/requirements-bench.txt scripts/requirements-python-package.txt)

say() { echo "python_package_venv.sh: $*" >&2; }

# One maker at a time: `make test` starts this script in the background while the C++ build runs
# (the download is ~2.5 GB and takes no CPU to speak of); a second call (test_python_package.sh)
# waits here for the first one, then finds the venv in place.
mkdir -p "$CACHE"
exec 9> "$CACHE/venv-py.lock"
flock 9

# The stamp (hash of both requirements files) is written last, so an interrupted install is redone
# from scratch on the next run.
stamp="$VENV/.attnkit-requirements.sha256"
want="$(cat "${REQUIREMENTS[@]}" | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "$VENV present"
else
  say "creating $VENV from ${REQUIREMENTS[*]} (PyTorch: about 2.5 GB to download unless pip's cache has it)"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-deps --require-hashes \
    -r scripts/requirements-bench.txt -r scripts/requirements-python-package.txt >&2
  "$VENV/bin/python" -c "import torch, transformers, pytest, gguf; from transformers import AttentionInterface; from transformers.masking_utils import AttentionMaskInterface" >&2
  echo "$want" > "$stamp"
fi
echo "$VENV/bin/python"
