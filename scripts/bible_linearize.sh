#!/usr/bin/env bash
# Linearizing the Bible translation model of scripts/bible_heads.sh (issue 45, part 4): the trained
# softmax encoder-decoder (its best validation checkpoint) converted at SITES to KIND by
# `attnkit linearize` (stage 1: attention transfer of the feature maps on the training pairs,
# held-out losses on the validation pairs), fine-tuned by `attnkit train --init` (stage 2: every
# weight, FT_STEPS steps of 32 pairs, cosine from lr 2e-4), then scored on every test verse by
# `attnkit eval` (the best checkpoint by validation BLEU). Stages skip when their output exists;
# stage 2 resumes from its newest checkpoint; every command niced, one thread.
# KIND softmax is the control: no conversion, the teacher itself fine-tuned by stage 2 the same way
# (what the extra steps alone do), in BIBLE_OUT/linearize/softmax-control.
# SEED > 0 repeats a cell with another seed (stage 1's draws and stage 2's data order and dropout)
# in a folder of its own, OUT-seedSEED.
# LORA > 0: stage 2 is low-rank instead (LoLCATs' stage 2: LoRA adapters of rank LORA, alpha
# 2·LORA, on every attention layer's q, k, v and o, every other weight frozen; lr 1e-3, as low-rank
# runs take a larger step than full fine-tuning), in OUT-loraLORA.
# Usage: bash scripts/bible_linearize.sh [BUILD] [BIBLE_OUT] [KIND] [SITES] [FT_STEPS] [SEED] [LORA]
#   defaults: build, runs/bible-clean, linear:hedgehog, all, 400, 0, 0
set -euo pipefail
BUILD="${1:-build}"
BIBLE="${2:-runs/bible-clean}"
KIND="${3:-linear:hedgehog}"
SITES="${4:-all}"
FT_STEPS="${5:-400}"
SEED="${6:-0}"
LORA="${7:-0}"
AK=(nice -n 19 "$BUILD/attnkit" --threads 1 --seed "$SEED")
OUT="$BIBLE/linearize/${KIND//:/-}-${SITES//,/+}"
[ "$KIND" != softmax ] || OUT="$BIBLE/linearize/softmax-control"
[ "$LORA" = 0 ] || OUT="$OUT-lora$LORA"
[ "$SEED" = 0 ] || OUT="$OUT-seed$SEED"
# Stage 2 starts from the cell's own student (stage 1 with its seed), the control from the teacher.
INIT="$OUT/student"
[ "$KIND" != softmax ] || INIT="$BIBLE/run"
stage2_flags=(--optimizer.lr 2e-4)
[ "$LORA" = 0 ] || stage2_flags=(--optimizer.lr 1e-3 --lora.rank "$LORA" --lora.alpha "$((2 * LORA))")
mkdir -p "$OUT"
site_flags=()
[ "$SITES" = all ] || site_flags=(--sites "$SITES")
if [ "$KIND" != softmax ] && [ ! -f "$OUT/student/transfer.json" ]; then
  /usr/bin/time -o "$OUT/linearize.time" -v "${AK[@]}" linearize --model "$BIBLE/run" --kind "$KIND" \
    "${site_flags[@]}" --data "$BIBLE/split/train.tsv" --eval-data "$BIBLE/split/val.tsv" --max-length 96 \
    --batch-size 16 --steps 300 --out "$OUT/student" > "$OUT/linearize.log" 2>&1
fi
if [ ! -f "$OUT/run/done" ]; then
  if [ -d "$OUT/run/checkpoints" ] && ls "$OUT/run/checkpoints" | grep -q step-; then
    /usr/bin/time -a -o "$OUT/train.time" -v "${AK[@]}" train --resume "$OUT/run" >> "$OUT/train.log" 2>&1
  else
    /usr/bin/time -o "$OUT/train.time" -v "${AK[@]}" train --init "$INIT" --task.name translation \
      --task.data "$BIBLE/split/train.tsv" --task.tokenizer "$BIBLE/tok" --task.truncate 96 \
      --task.batch_size 32 --task.eval_examples 100 --task.label_smoothing 0.1 "${stage2_flags[@]}" \
      --schedule.kind cosine --schedule.warmup 50 --run.seed "$SEED" --run.steps "$FT_STEPS" --run.eval_every 100 \
      --run.checkpoint_every 100 --run.dir "$OUT/run" > "$OUT/train.log" 2>&1
  fi
  touch "$OUT/run/done"
fi
if [ ! -f "$OUT/test-scores.txt" ]; then
  "${AK[@]}" eval --run "$OUT/run" --checkpoint best --split test --examples 0 > "$OUT/test-scores.tmp"
  mv "$OUT/test-scores.tmp" "$OUT/test-scores.txt"
fi
echo "bible_linearize.sh: $OUT/test-scores.txt"
