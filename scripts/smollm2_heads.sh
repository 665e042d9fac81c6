#!/usr/bin/env bash
# Michel et al.'s head experiment on a real pretrained model (issue 42): SmolLM2-135M-Instruct
# from its GGUF file (~/.cache/attnkit/weights, scripts/setup.sh), 30 layers x 9 query heads in
# 3 key/value groups each. Importance from one held-out Bible text (the English side of the
# leak-free split's validation books), every metric on another (its test books): the baseline,
# the head profiles (ascending importance, random, descending) and the key/value-group profiles,
# each step with its next-token accuracy and perplexity. Then the rank collapse of the model's
# paths on the same text. Niced; each stage is skipped when its output is there (resumable).
# Usage: bash scripts/smollm2_heads.sh [BUILD] [OUT] [VERSES]
#   VERSES: verses of each text used (default 200; the whole test books are ~1,000).
set -euo pipefail
BUILD="${1:-build}"
OUT="${2:-runs/smollm2-heads}"
VERSES="${3:-200}"
CACHE="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}"
MODEL="$CACHE/weights/smollm2-135m-instruct.gguf"
[ -f "$MODEL" ] || { echo "smollm2_heads.sh: no $MODEL (run scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$OUT"
if [ ! -f "$OUT/split/test.tsv" ]; then
  nice -n 19 "$BUILD/attnkit" --quiet data parallel --out "$OUT/split"
fi
# One verse per line (the English column), the first VERSES of each file.
head -n "$VERSES" "$OUT/split/val.tsv" | cut -f1 > "$OUT/importance.txt"
head -n "$VERSES" "$OUT/split/test.tsv" | cut -f1 > "$OUT/evaluation.txt"
if [ ! -f "$OUT/heads/heads.json" ]; then
  /usr/bin/time -v nice -n 19 "$BUILD/attnkit" --threads 2 analyze heads --model "$MODEL" \
    --score-data "$OUT/importance.txt" --data "$OUT/evaluation.txt" --max-length 128 \
    --batch-size 8 --no-ablation --fractions 5,10,15,20,30,40,50,70 --out "$OUT/heads" \
    2> "$OUT/heads.time"
fi
if [ ! -f "$OUT/collapse/collapse.json" ]; then
  /usr/bin/time -v nice -n 19 "$BUILD/attnkit" --threads 2 analyze collapse --model "$MODEL" \
    --data "$OUT/evaluation.txt" --seq-len 64 --samples 32 --out "$OUT/collapse" 2> "$OUT/collapse.time" || \
    echo "smollm2_heads.sh: analyze collapse failed (see $OUT/collapse.time)" >&2
fi
echo "smollm2_heads.sh: $OUT/heads/heads.json, $OUT/collapse/"
