#!/usr/bin/env bash
# Linearizing a language model trained here (issue 45, part 4: "on a language model, perplexity on
# held-out text against CPU time"). The data is the English side of the leak-free Bible split of
# scripts/bible_heads.sh (BIBLE_OUT/split: training books to train on, test books held out, one
# verse per line) with its Unigram tokenizer (BIBLE_OUT/tok):
#   1. teacher: a GPT-2-shaped softmax LM (4 layers, hidden 256, 8 heads) trained TEACHER_STEPS
#      steps of 16 blocks of 128 tokens (OUT/teacher);
#   2. a cell per KIND: `attnkit linearize` of every layer (stage 1: attention transfer of the
#      feature maps, 300 steps; kinds without trained maps measure their transfer loss only), then
#      `attnkit train --init` (stage 2: every weight, FT_STEPS steps, cosine from lr 3e-4), its
#      validation perplexity every 100 steps against the run's CPU seconds; KIND softmax is the
#      control (the teacher fine-tuned the same way);
#   3. every model's perplexity on the test books, `attnkit eval --split test` (OUT/teacher/test-scores.txt, OUT/CELL/test-scores.txt).
# Stages skip when their output exists and training resumes from its newest checkpoint; every
# command niced, one thread. Stand-in named: a 4-layer model of ~5M parameters trained on ~30k
# verses is what this machine's budget allows, not a pretrained LM (SmolLM2's linearization costs
# are measured by bench/linearized_decode.py).
# Usage: bash scripts/lm_linearize.sh [BUILD] [BIBLE_OUT] [OUT] [KINDS] [TEACHER_STEPS] [FT_STEPS] [SEED]
#   defaults: build, runs/bible-clean, runs/lm-linearize, softmax,linear:hedgehog,linear:t2r,linear:elu,cosformer,
#   3000, 600, 0; LIN_STEPS (environment) sets stage 1's steps (default 300).
set -euo pipefail
BUILD="${1:-build}"
BIBLE="${2:-runs/bible-clean}"
OUT="${3:-runs/lm-linearize}"
KINDS="${4:-softmax,linear:hedgehog,linear:t2r,linear:elu,cosformer}"
TEACHER_STEPS="${5:-3000}"
FT_STEPS="${6:-600}"
SEED="${7:-0}"
AK=(nice -n 19 "$BUILD/attnkit" --threads 1 --seed "$SEED")
for f in "$BIBLE/split/train.tsv" "$BIBLE/split/test.tsv" "$BIBLE/tok/tokenizer.json"; do
  [ -f "$f" ] || { echo "lm_linearize.sh: no $f (run scripts/bible_heads.sh first)" >&2; exit 1; }
done
mkdir -p "$OUT/data"
# The English column, one verse per line; `eval --split test` reads test.txt beside train.txt;
# stage 1's held-out transfer losses are on the validation books (val.txt).
for split in train val test; do
  if [ ! -f "$OUT/data/$split.txt" ]; then
    cut -f1 "$BIBLE/split/$split.tsv" > "$OUT/data/$split.tmp"
    mv "$OUT/data/$split.tmp" "$OUT/data/$split.txt"
  fi
done
LM=(--task.name lm --task.data "$OUT/data/train.txt" --task.tokenizer "$BIBLE/tok" --task.truncate 128
    --task.batch_size 16)

# train_until DIR LOG ARGS... (scripts/train_until.sh): a run that resumes from its newest checkpoint.
source "$(dirname "$0")/train_until.sh"

test_perplexity() {  # test_perplexity RUN OUT_JSON: the best checkpoint on the test books
  if [ ! -f "$2" ]; then
    "${AK[@]}" eval --run "$1" --checkpoint best --split test --examples 0 > "$2.tmp"
    mv "$2.tmp" "$2"
  fi
}

train_until "$OUT/teacher" "$OUT/teacher.log" "${LM[@]}" --model.family gpt2 --model.hidden 256 \
  --model.layers 4 --model.heads 8 --model.dropout 0.1 --optimizer.lr 1e-3 --schedule.kind cosine \
  --schedule.warmup 200 --run.seed "$SEED" --run.steps "$TEACHER_STEPS" --run.eval_every 250 \
  --run.checkpoint_every 250
test_perplexity "$OUT/teacher" "$OUT/teacher/test-scores.txt"

IFS=',' read -r -a kinds <<< "$KINDS"
for KIND in "${kinds[@]}"; do
  CELL="$OUT/${KIND//:/-}"
  [ "$SEED" = 0 ] || CELL="$CELL-seed$SEED"
  mkdir -p "$CELL"
  linearize_cell "$CELL" "$KIND" "$OUT/teacher" "$OUT/data" 16
  train_until "$CELL/run" "$CELL/train.log" --init "$INIT" "${LM[@]}" --optimizer.lr 3e-4 \
    --schedule.kind cosine --schedule.warmup 50 --run.seed "$SEED" --run.steps "$FT_STEPS" \
    --run.eval_every 100 --run.checkpoint_every 100
  test_perplexity "$CELL/run" "$CELL/test-scores.txt"
done
echo "lm_linearize.sh: $OUT"
