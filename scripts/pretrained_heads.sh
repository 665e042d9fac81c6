#!/usr/bin/env bash
# Michel et al.'s head experiment on a real pretrained model (issues 42, 44), from its GGUF file
# in ~/.cache/attnkit/weights (scripts/setup.sh):
#   smollm2  SmolLM2-135M-Instruct: 30 layers x 9 query heads in 3 key/value groups
#   gemma3   Gemma 3 270M: 18 layers x 4 query heads sharing 1 key/value head (groups = layers)
# Importance from one held-out Bible text (the English side of the leak-free split's validation
# books), every metric on another (its test books): the baseline, the head profiles (ascending
# importance, RANDOM_ORDERS random orders, descending) and, where a layer has several key/value
# groups, the group profiles, each step with paired bootstrap intervals against the unpruned model
# over the evaluation windows. Then the rank collapse of the model's paths on the evaluation text,
# and of random weights of its shape on the same windows.
# Niced; each stage is skipped when its output is there (resumable).
# Usage: bash scripts/pretrained_heads.sh MODEL [BUILD] [OUT] [VERSES] [RANDOM_ORDERS]
#   MODEL: smollm2 | gemma3; OUT: default runs/MODEL-heads; VERSES: verses of each text (default
#   200; the whole test books are ~1,000); RANDOM_ORDERS: default 5.
# bench/pretrained_heads_results.py then writes docs/pretrained-heads.json and the tables of
# docs/analysis.md from OUT.
set -euo pipefail
NAME="${1:?usage: bash scripts/pretrained_heads.sh smollm2|gemma3 [BUILD] [OUT] [VERSES] [RANDOM_ORDERS]}"
BUILD="${2:-build}"
OUT="${3:-runs/$NAME-heads}"
VERSES="${4:-200}"
ORDERS="${5:-5}"
CACHE="${ATTNKIT_CACHE:-$HOME/.cache/attnkit}"
case "$NAME" in
  smollm2) MODEL="$CACHE/weights/smollm2-135m-instruct.gguf"; FRACTIONS=1,2,3,5,7.5,10,15,20,30,50 ;;
  gemma3) MODEL="$CACHE/weights/gemma-3-270m-q4_k_m.gguf"; FRACTIONS=1.5,3,4.5,6,7.5,10,15,20,30,40,50 ;;
  *) echo "pretrained_heads.sh: MODEL must be smollm2 or gemma3, not '$NAME'" >&2; exit 2 ;;
esac
[ -f "$MODEL" ] || { echo "pretrained_heads.sh: no $MODEL (run scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$OUT"
if [ ! -f "$OUT/split/test.tsv" ]; then
  nice -n 19 "$BUILD/attnkit" --quiet data parallel --out "$OUT/split"
fi
# One verse per line (the English column), the first VERSES of each file; a file already there
# with the same text is left as it is (its modification time is part of the pass store's settings,
# so rewriting it would make a resumed analysis start over).
text_of() {  # text_of SOURCE DEST
  head -n "$VERSES" "$1" | cut -f1 > "$2.tmp"
  if cmp -s "$2.tmp" "$2"; then rm -f "$2.tmp"; else mv -f "$2.tmp" "$2"; fi
}
text_of "$OUT/split/val.tsv" "$OUT/importance.txt"
text_of "$OUT/split/test.tsv" "$OUT/evaluation.txt"
if [ ! -f "$OUT/heads/heads.json" ]; then
  /usr/bin/time -a -v nice -n 19 "$BUILD/attnkit" --threads 2 analyze heads --model "$MODEL" \
    --score-data "$OUT/importance.txt" --data "$OUT/evaluation.txt" --max-length 128 \
    --batch-size 8 --no-ablation --fractions "$FRACTIONS" --random-orders "$ORDERS" \
    --out "$OUT/heads" > "$OUT/heads.log" 2> "$OUT/heads.time"
fi
if [ ! -f "$OUT/collapse/collapse.json" ]; then
  /usr/bin/time -v nice -n 19 "$BUILD/attnkit" --threads 2 analyze collapse --model "$MODEL" \
    --data "$OUT/evaluation.txt" --seq-len 64 --samples 32 --out "$OUT/collapse" 2> "$OUT/collapse.time" || \
    echo "pretrained_heads.sh: analyze collapse failed (see $OUT/collapse.time)" >&2
fi
# The same windows through random weights of the model's shape (3 draws, init std 0.02): what the
# trained paths' residuals are compared with (minutes: no short-path experiment).
if [ ! -f "$OUT/collapse-random/collapse.json" ]; then
  /usr/bin/time -v nice -n 19 "$BUILD/attnkit" --threads 2 analyze collapse --random "$MODEL" --seeds 3 \
    --data "$OUT/evaluation.txt" --seq-len 64 --samples 32 --no-short-paths --out "$OUT/collapse-random" \
    2> "$OUT/collapse-random.time" || \
    echo "pretrained_heads.sh: analyze collapse --random failed (see $OUT/collapse-random.time)" >&2
fi
echo "pretrained_heads.sh: $OUT/heads/heads.json, $OUT/collapse/, $OUT/collapse-random/"
