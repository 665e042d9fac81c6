#!/usr/bin/env bash
# Creates (once) the benchmark-only venv with llama-cpp-python (llama.cpp, built here from its
# source package) for bench/decode_smollm2.py and prints its python. Called by bench/run.sh
# (make bench); setup.sh and make test do not need it. Idempotent: re-runs reuse the venv while
# scripts/requirements-llamacpp-bench.txt is unchanged. The build runs niced with 2 jobs (its
# log: the venv's build.log); CPU only, no BLAS, for this machine's ISA (GGML_NATIVE), without
# llama.cpp's tools, tests, server and the multimodal library.
set -euo pipefail
venv="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/venv-llamacpp-bench"
requirements="$(cd "$(dirname "$0")" && pwd)/requirements-llamacpp-bench.txt"
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements-llamacpp-bench.txt"; then
  echo "$venv/bin/python"
  exit 0
fi
echo "llamacpp_bench_venv.sh: creating $venv (builds llama.cpp: several minutes)" >&2
# The copy of the requirements, written last, marks a complete venv.
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv" >&2
mkdir -p "$venv/build-tmp"
# Build tools and run-time dependencies first (every line but llama-cpp-python), then the package.
grep -v -e '^#' -e '^llama-cpp-python' "$requirements" | grep . > "$venv/deps.txt"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$venv/deps.txt" >&2
if ! CMAKE_BUILD_PARALLEL_LEVEL=2 TMPDIR="$venv/build-tmp" \
    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF" \
    nice -n 10 "$venv/bin/pip" install -v --disable-pip-version-check --no-deps --no-build-isolation \
    --no-binary llama-cpp-python "$(grep '^llama-cpp-python' "$requirements")" > "$venv/build.log" 2>&1; then
  echo "llamacpp_bench_venv.sh: building llama-cpp-python failed; the last lines of $venv/build.log:" >&2
  tail -n 15 "$venv/build.log" >&2
  exit 1
fi
rm -rf "$venv/build-tmp"
"$venv/bin/python" -c 'import llama_cpp' >&2
cp "$requirements" "$venv/requirements-llamacpp-bench.txt"
echo "$venv/bin/python"
