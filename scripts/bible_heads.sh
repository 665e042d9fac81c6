#!/usr/bin/env bash
# Michel et al.'s experiment on the Bible translation model, on the leak-free split (issue 44):
# World English Bible -> Reina-Valera 1909 (Debian's SWORD modules, scripts/setup.sh), the split of
# `attnkit data parallel`'s defaults (no held-out book with parallel passages in training, near
# duplicates across splits dropped; docs/training.md). Stages, each skipped when its output is
# there, every command niced, so the run resumes across sessions:
#   1. split           OUT/split/{train,val,test}.tsv (+ split.json, the measured overlap)
#   2. vocabulary      a joint Unigram vocabulary of 8,000 pieces on both sides of train.tsv
#   3. training        encoder-decoder 3 + 3 layers, hidden 256, HEADS heads at each of the three
#                      sites, 4,000 steps of 32 pairs, one thread; resumes from its newest
#                      checkpoint; the best checkpoint by validation BLEU (100 verses) is the model
#   4. test scores     `attnkit eval` of that checkpoint on every test verse (BLEU, chrF2)
#   5. heads           importance and the pruning orders from the validation verses
#                      (--score-data), every reported number (ablations, profiles with RANDOM_ORDERS
#                      random orders, paired bootstrap intervals) on the test verses; every metric
#                      pass is kept in OUT/heads/passes.jsonl, so a killed stage resumes where it
#                      was (heads.time then adds up the processes that finished, not the killed ones)
# Usage: bash scripts/bible_heads.sh [BUILD] [OUT] [HEADS] [RANDOM_ORDERS]
#   defaults: build, runs/bible-clean, 8, 5
set -euo pipefail
BUILD="${1:-build}"
OUT="${2:-runs/bible-clean}"
HEADS="${3:-8}"
ORDERS="${4:-5}"
AK=(nice -n 19 "$BUILD/attnkit" --threads 1)
mkdir -p "$OUT"
if [ ! -f "$OUT/split/test.tsv" ]; then
  "${AK[@]}" data parallel --out "$OUT/split"
fi
if [ ! -f "$OUT/tok/tokenizer.json" ]; then
  { cut -f1 "$OUT/split/train.tsv"; cut -f2 "$OUT/split/train.tsv"; } > "$OUT/train-both.txt"
  "${AK[@]}" tokenizer train --kind unigram --vocab-size 8000 --out "$OUT/tok" "$OUT/train-both.txt"
fi
if [ ! -f "$OUT/run/done" ]; then
  if [ -d "$OUT/run/checkpoints" ] && ls "$OUT/run/checkpoints" | grep -q step-; then
    /usr/bin/time -a -o "$OUT/train.time" -v "${AK[@]}" train --resume "$OUT/run" >> "$OUT/train.log" 2>&1
  else
    /usr/bin/time -o "$OUT/train.time" -v "${AK[@]}" train --task.name translation \
      --task.data "$OUT/split/train.tsv" --task.tokenizer "$OUT/tok" --task.truncate 96 \
      --task.batch_size 32 --task.eval_examples 100 --task.label_smoothing 0.1 \
      --model.hidden 256 --model.layers 3 --model.heads "$HEADS" --model.intermediate 1024 \
      --model.pre_ln true --optimizer.lr 7e-4 --schedule.kind cosine --schedule.warmup 300 \
      --run.steps 4000 --run.eval_every 500 --run.checkpoint_every 250 --run.dir "$OUT/run" \
      > "$OUT/train.log" 2>&1
  fi
  touch "$OUT/run/done"
fi
if [ ! -f "$OUT/test-scores.txt" ]; then
  "${AK[@]}" eval --run "$OUT/run" --checkpoint best --split test --examples 0 > "$OUT/test-scores.tmp"
  mv "$OUT/test-scores.tmp" "$OUT/test-scores.txt"
fi
if [ ! -f "$OUT/heads/heads.json" ]; then
  /usr/bin/time -a -o "$OUT/heads.time" -v "${AK[@]}" analyze heads --model "$OUT/run" \
    --score-data "$OUT/split/val.tsv" --data "$OUT/split/test.tsv" --max-length 96 \
    --batch-size 64 --random-orders "$ORDERS" --out "$OUT/heads" >> "$OUT/heads.log" 2>&1
fi
echo "bible_heads.sh: $OUT/test-scores.txt, $OUT/heads/heads.json"
