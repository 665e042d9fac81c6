#!/usr/bin/env bash
# The benchmark-only Python environment, made on demand by `make bench` (bench/run.sh); `make test`
# and scripts/setup.sh never need it. Idempotent: a second run only checks. Prints the venv's
# python on stdout when everything is in place (messages go to stderr).
#
#   1. $ATTNKIT_CACHE/venv-bench (default ~/.cache/attnkit/venv-bench): a venv over Debian's
#      /usr/bin/python3 without system site packages, filled from scripts/requirements-bench.txt
#      (PyTorch 2.x and the nvidia-* libraries `import torch` needs; every file hash-checked;
#      about 2.5 GB downloaded once, 4.1 GB on disk). Redone when that file changes.
#   2. The pytorch-fast-transformers source distribution from PyPI (pinned version, hash-checked),
#      unpacked under $ATTNKIT_CACHE/src/; nothing of it is copied into the repository.
#   3. Its CPU causal-product kernel (fast_transformers/causal_product/causal_product_cpu.cpp, that
#      one file) built with torch.utils.cpp_extension against the venv's torch, cached under
#      $ATTNKIT_CACHE/build/ (bench/peers/fast_transformers_kernel.py).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}"
VENV="$CACHE/venv-bench"
REQUIREMENTS=scripts/requirements-bench.txt
FT_VERSION=0.4.0
FT_SHA256=d1826bc31b9dfbcd018998b897667e89fc6566bd3f8c424cda9f0943544f7e90
FT_SOURCE="$CACHE/src/pytorch-fast-transformers-$FT_VERSION"

say() { echo "bench_venv.sh: $*" >&2; }

# 1. The venv. The stamp (hash of the requirements file) is written last, so an interrupted install
#    is redone from scratch on the next run.
stamp="$VENV/.attnkit-requirements.sha256"
want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "$VENV present"
else
  say "creating $VENV from $REQUIREMENTS (about 2.5 GB to download, once)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-deps --require-hashes -r "$REQUIREMENTS" >&2
  "$VENV/bin/python" -c "import torch, torch.utils.cpp_extension" >&2
  echo "$want" > "$stamp"
fi

# 2. fast-transformers' sources. pip prepares the metadata of a source distribution by running its
#    setup.py, which imports torch: hence the venv's pip and --no-build-isolation.
if [ ! -f "$FT_SOURCE/.complete" ]; then
  say "fetching pytorch-fast-transformers $FT_VERSION (source distribution, hash-checked)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "pytorch-fast-transformers==$FT_VERSION --hash=sha256:$FT_SHA256" > "$tmp/requirements.txt"
  "$VENV/bin/pip" download --quiet --no-deps --no-binary :all: --no-build-isolation \
    --require-hashes -r "$tmp/requirements.txt" -d "$tmp/dist" >&2
  archive="$tmp/dist/pytorch-fast-transformers-$FT_VERSION.tar.gz"
  echo "$FT_SHA256  $archive" | sha256sum --check --quiet
  rm -rf "$FT_SOURCE"
  mkdir -p "$(dirname "$FT_SOURCE")"
  tar -xzf "$archive" -C "$tmp"
  mv "$tmp/pytorch-fast-transformers-$FT_VERSION" "$FT_SOURCE"
  touch "$FT_SOURCE/.complete"
fi

# 3. The kernel (torch.utils.cpp_extension rebuilds only when the source or flags change).
ATTNKIT_CACHE="$CACHE" "$VENV/bin/python" bench/peers/fast_transformers_kernel.py --build >&2
echo "$VENV/bin/python"
