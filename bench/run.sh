#!/usr/bin/env bash
# make bench [BENCH=attention] -> bash bench/run.sh BUILD_DIR [compare.py options, e.g. --quick]
# Builds the benchmark binaries and the torch.ops library if needed, makes the benchmark-only
# Python environment (scripts/bench_venv.sh: PyTorch 2.x, fast-transformers' kernel; once, then
# only checked), then runs bench/compare.py (attnkit vs PyTorch 2.x SDPA / cosFormer,
# fast-transformers and PyTorch 1.13 eager, one fresh process per case; writes
# docs/benchmarks.md on full runs) and the other benchmarks. BENCH=attention stops after
# compare.py. The MLM training step against BertForMaskedLM (bench/mlm_compare.py) and the last
# part, bench/hf_attention_compare.py, run their peers in the Python package venv.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
shift || true
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "bench/run.sh: $BUILD is not a configured build dir (run: make build)" >&2
  exit 1
fi
BENCH="${BENCH:-all}"
case "$BENCH" in all|attention) ;; *) echo "bench/run.sh: BENCH=$BENCH (all or attention)" >&2; exit 1;; esac
cmake --build "$BUILD" --target attnkit_bench_attention attnkit_bench_train attnkit_torch_ops \
  attnkit_tokenizer_bench -j "${JOBS:-2}"
BENCH_PYTHON="$(bash scripts/bench_venv.sh)"
# Debian's interpreter with python3-torch (the 1.13 peer), not whatever python3 is first on PATH.
/usr/bin/python3 bench/compare.py --build "$BUILD" --bench-python "$BENCH_PYTHON" "$@"
if [ "$BENCH" = attention ]; then exit 0; fi
echo
echo "== float32 GEMM library: oneDNN against OpenBLAS, same binary (ATTNKIT_GEMM) =="
quick=""; [[ " $* " == *" --quick "* ]] && quick="--quick"
/usr/bin/python3 bench/gemm_library.py --build "$BUILD" $quick
echo
echo "== tokenizers: attnkit vs Hugging Face tokenizers (Node), same lines, same threads =="
"$BUILD/attnkit_tokenizer_bench" "$BUILD/tokenizer_bench"
echo
echo "== training: attnkit vs the same loop in PyTorch (best attention per kind; eager for context) =="
cmake --build "$BUILD" --target attnkit_bench_train -j "${JOBS:-2}"
/usr/bin/python3 bench/train_compare.py --build "$BUILD" --bench-python "$BENCH_PYTHON" "$@"
echo
echo "== MLM training step (BERT-base shape): attnkit vs transformers' BertForMaskedLM, sdpa, PyTorch 2.x =="
# The peer runs in the Python package's venv (torch 2.x + transformers; scripts/python_package_venv.sh,
# made once, then only checked); without it (e.g. offline) this part is skipped.
if MLM_PY="$(bash scripts/python_package_venv.sh)"; then
  /usr/bin/python3 bench/mlm_compare.py --build "$BUILD" --peer-python "$MLM_PY" "$@"
else
  echo "bench/run.sh: no Python package venv (scripts/python_package_venv.sh failed): skipping the MLM step comparison" >&2
fi
echo
echo "== decoding: KV cache vs RNN state, greedy vs python3-torch eager and CTranslate2 =="
cmake --build "$BUILD" --target attnkit_bench_decode -j "${JOBS:-2}"
# CTranslate2 lives in a benchmark-only venv made on first use (pinned, idempotent); without it
# (e.g. offline) the decoding comparison runs without the CTranslate2 column.
DECODE_PY="$(bash scripts/decode_bench_venv.sh)" || DECODE_PY=""
/usr/bin/python3 bench/decode_compare.py --build "$BUILD" --ct2-python "$DECODE_PY" "$@"
echo
echo "== decoding, Marian (Opus-MT shape): attnkit generate vs CTranslate2 and transformers, same ids first =="
cmake --build "$BUILD" --target attnkit_cli -j "${JOBS:-2}"
if [ -n "$DECODE_PY" ]; then
  "$DECODE_PY" bench/decode_ct2_marian.py --build "$BUILD" "$@"
  echo
  echo "== decoding: per-token overhead of a 2-layer model, attnkit generate vs CTranslate2 =="
  for threads in 1 2; do
    "$DECODE_PY" bench/decode_overhead.py --build "$BUILD" --threads "$threads" --repeats 5
  done
  echo
  echo "== start: a one-token Marian generate, published and in attnkit's format (target <= 0.5 s) =="
  bash bench/marian_start.sh "$BUILD"
else
  echo "bench/run.sh: no CTranslate2 venv (scripts/decode_bench_venv.sh failed): skipping the Marian comparison" >&2
fi
echo
echo "== decoding, SmolLM2-135M (its GGUF, float32): attnkit generate vs CTranslate2 and llama.cpp, prefill vs transformers sdpa =="
# llama.cpp is llama-cpp-python built here from its source package (scripts/llamacpp_bench_venv.sh)
# and the sdpa peer (and the F32 GGUF) runs in the Python package's venv, each made on first use;
# without one the comparison runs without its columns (and says why). Without the weights
# (scripts/setup.sh fetches them) or the CTranslate2 venv this part is skipped.
SMOLLM2_GGUF="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}/weights/smollm2-135m-instruct.gguf"
if [ -n "$DECODE_PY" ] && [ -f "$SMOLLM2_GGUF" ]; then
  LLAMA_PY="$(bash scripts/llamacpp_bench_venv.sh)" || LLAMA_PY=""
  SDPA_PY="$(bash scripts/python_package_venv.sh)" || SDPA_PY=""
  "$DECODE_PY" bench/decode_smollm2.py --build "$BUILD" --gguf "$SMOLLM2_GGUF" \
    --llama-python "$LLAMA_PY" --sdpa-python "$SDPA_PY" "$@"
else
  echo "bench/run.sh: no CTranslate2 venv or no $SMOLLM2_GGUF: skipping the SmolLM2 comparison" >&2
fi
echo
echo "== heads: BERT-base-shaped model, 50% of heads pruned vs unpruned (inference) =="
cmake --build "$BUILD" --target attnkit_bench_heads -j "${JOBS:-2}"
/usr/bin/python3 bench/heads_compare.py --build "$BUILD" "$@"
echo
echo "== Hugging Face: GPT-2 small and BERT-base, attn_implementation sdpa vs attnkit (one process) =="
# The Python package's venv (scripts/python_package_venv.sh, made once, then only checked) and
# `pip install .` into it, as `make test-python` does (without pytest); without the venv (e.g.
# offline) this part is skipped.
if HF_PY="$(bash scripts/python_package_venv.sh)"; then
  if command -v ccache > /dev/null; then
    export CC="ccache gcc" CXX="ccache g++" CCACHE_BASEDIR="$PWD"
  fi
  "$HF_PY" -m pip install --quiet --no-build-isolation --no-deps --no-index .
  "$HF_PY" bench/hf_attention_compare.py "$@"
else
  echo "bench/run.sh: no Python package venv (scripts/python_package_venv.sh failed): skipping the Hugging Face comparison" >&2
fi
