#!/usr/bin/env bash
# make demo -> bash scripts/demo.sh BUILD_DIR: the tour of what attnkit does today, in a few
# minutes on 2 cores. Outputs land in demo-output/ (not tracked).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT="${DEMO_OUT:-demo-output}"
AK="$BUILD/attnkit"
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== 1. every attention variant against its float64 oracle =="
"$AK" demo --out "$OUT"

echo
echo "== 2. train the copy task (causal LM) with cosFormer attention, 300 steps =="
"$AK" train --config data/configs/copy.toml --model.attention cosformer --run.steps 300 \
  --run.eval_every 100 --run.dir "$OUT/copy-cosformer"
"$AK" eval --run "$OUT/copy-cosformer"

echo
echo "== 3. the trained model is a model directory: convert it to Hugging Face GPT-2 layout? =="
echo "   (cosFormer has no HF equivalent, so attnkit says so instead of writing a wrong file)"
"$AK" convert --from "$OUT/copy-cosformer/checkpoints/best/model.safetensors" \
  --to "$OUT/copy-hf" --format huggingface || true

if "$AK" analyze --help >/dev/null 2>&1; then
  echo
  echo "== 4. rank collapse of a random 12-layer softmax stack (Dong et al. 2021) =="
  "$AK" analyze collapse --random gpt2 --layers 12 --heads 4 --out "$OUT/collapse"
  echo "   plots and numbers: $OUT/collapse/"
  echo
  echo "== 5. the same measurements on the cosFormer model trained in step 2 =="
  "$AK" analyze collapse --model "$OUT/copy-cosformer/checkpoints/best/model.safetensors" \
    --seq-len 12 --out "$OUT/collapse-trained"
fi
echo
echo "== the report: one self-contained HTML page of the stages that write a section =="
"$AK" report "$OUT"
echo "demo: done; outputs in $OUT/"
