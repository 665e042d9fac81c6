#!/usr/bin/env bash
# Linearizing a pretrained language model (issue 45, part 4: "on a language model ... and SmolLM2
# when it loads, perplexity on held-out text against CPU time"). The data is the English side of
# the leak-free Bible split, as scripts/lm_linearize.sh makes it (DATA/{train,val,test}.txt: the
# training, validation and test books, one verse per line); the tokenizer is the model's own.
#   1. the teacher: MODEL (a GGUF file or a model directory) converted to attnkit format (OUT/teacher);
#   2. a cell per KIND: `attnkit linearize` of every layer (stage 1: attention transfer of the
#      feature maps, LIN_STEPS steps of BATCH windows of 128 tokens; held-out transfer losses on the
#      validation books), then `attnkit train --init` (stage 2: every weight, FT_STEPS steps of
#      BATCH blocks of 128 tokens, cosine from lr LR, validation perplexity every EVAL_EVERY steps
#      against the run's CPU seconds); KIND softmax is the control (the teacher fine-tuned the same
#      way on the same blocks);
#   3. on the test books: each cell's best checkpoint and the teacher untrained (`eval --checkpoint
#      init` of the cell's run) with their per-block items (OUT/CELL/test-items.json,
#      OUT/CELL/teacher-items.json) for `eval --paired-bs`.
# Stages skip when their output exists and training resumes from its newest checkpoint; every
# command niced, one thread. A training process of SmolLM2-135M holds ~8.5 GB (AdamW's state).
# Usage: bash scripts/pretrained_linearize.sh [BUILD] [MODEL] [DATA] [OUT] [KINDS] [FT_STEPS] [SEED]
#   defaults: build, ~/.cache/attnkit/weights/smollm2-135m-instruct.gguf, runs/lm-linearize/data,
#   runs/smollm2-linearize, linear:hedgehog,softmax, 300, 0; environment: LIN_STEPS (300), BATCH (8),
#   LR (1e-4), EVAL_EVERY (50).
set -euo pipefail
BUILD="${1:-build}"
MODEL="${2:-$HOME/.cache/attnkit/weights/smollm2-135m-instruct.gguf}"
DATA="${3:-runs/lm-linearize/data}"
OUT="${4:-runs/smollm2-linearize}"
KINDS="${5:-linear:hedgehog,softmax}"
FT_STEPS="${6:-300}"
SEED="${7:-0}"
BATCH="${BATCH:-8}"
AK=(nice -n 19 "$BUILD/attnkit" --threads 1 --seed "$SEED")
for f in "$MODEL" "$DATA/train.txt" "$DATA/val.txt" "$DATA/test.txt"; do
  [ -e "$f" ] || { echo "pretrained_linearize.sh: no $f (scripts/setup.sh fetches the weights; scripts/lm_linearize.sh makes the data)" >&2; exit 1; }
done
mkdir -p "$OUT"
if [ ! -f "$OUT/teacher/model.safetensors" ]; then
  "${AK[@]}" convert --from "$MODEL" --to "$OUT/teacher.tmp" > /dev/null
  rm -rf "$OUT/teacher"
  mv "$OUT/teacher.tmp" "$OUT/teacher"
fi
LM=(--task.name lm --task.data "$DATA/train.txt" --task.tokenizer "$OUT/teacher" --task.truncate 128
    --task.batch_size "$BATCH")
source "$(dirname "$0")/train_until.sh"

IFS=',' read -r -a kinds <<< "$KINDS"
for KIND in "${kinds[@]}"; do
  CELL="$OUT/${KIND//:/-}"
  [ "$SEED" = 0 ] || CELL="$CELL-seed$SEED"
  mkdir -p "$CELL"
  linearize_cell "$CELL" "$KIND" "$OUT/teacher" "$DATA" "$BATCH"
  RUN="$CELL/run"
  train_until "$RUN" "$CELL/train.log" --init "$INIT" "${LM[@]}" --optimizer.lr "${LR:-1e-4}" \
    --schedule.kind cosine --schedule.warmup 20 --run.seed "$SEED" --run.steps "$FT_STEPS" \
    --run.eval_every "${EVAL_EVERY:-50}" --run.checkpoint_every 25 --run.keep_last 1
  # The test books: the best checkpoint, and the model the cell started from (for a student: after
  # stage 1, before stage 2), each with its per-block items.
  for which in best init; do
    items="$CELL/test-items-$which.json"
    if [ ! -f "$items" ]; then
      "${AK[@]}" eval --run "$RUN" --checkpoint "$which" --split test --examples 0 --items "$items.tmp" \
        > "$CELL/test-scores-$which.txt"
      mv "$items.tmp" "$items"
    fi
  done
done
echo "pretrained_linearize.sh: $OUT"
