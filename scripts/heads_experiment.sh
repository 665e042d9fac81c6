#!/usr/bin/env bash
# The classifier experiment of docs/analysis.md ("A classifier fine-tuned with attnkit train
# --init"): a random-init BERT saved by Hugging Face transformers (test venv), fine-tuned with
# `attnkit train --init` on a synthetic sentiment task (label = more positive than negative words
# among 16), then Michel et al.'s analysis with the heads chosen on validation data and judged on
# test data: `attnkit analyze heads` (importance and the pruning orders from val.tsv, every reported
# number on test.tsv, RANDOM_ORDERS random orders, paired bootstrap intervals), the same with the
# importance re-scored after each step (--exact), `attnkit prune` of half the heads, and `analyze
# heads --run` over the training checkpoints. bench/classifier_heads_results.py writes its part of
# docs/analysis.md from OUT. Every command is timed into OUT/*.time.
# Usage: bash scripts/heads_experiment.sh [BUILD] [OUT] [RANDOM_ORDERS]   (defaults: build,
# runs/heads, 5; a few CPU minutes)
set -euo pipefail
BUILD="${1:-build}"
OUT="${2:-runs/heads}"
ORDERS="${3:-5}"
mkdir -p "$OUT"
PY="$(scripts/peer_python.sh)"
"$PY" - "$OUT" <<'PYEOF'
import os, random, sys
import torch, transformers
out = sys.argv[1]
words = ["good", "great", "fine", "bad", "awful", "poor", "movie", "the", "a", "plot", "actor",
         "film", "was", "and", "story", "music", "scene", "very", "not", "it"]
pos, neg = {"good", "great", "fine"}, {"bad", "awful", "poor"}
def data(path, count, seed, length):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            ws = [rng.choice(words) for _ in range(length)]
            p = sum(w in pos for w in ws); n = sum(w in neg for w in ws)
            if p == n:
                ws[rng.randrange(length)] = rng.choice(sorted(pos))
                p += 1
            f.write(" ".join(ws) + "\t" + ("pos" if p > n else "neg") + "\n")
data(os.path.join(out, "train.tsv"), 4000, 1, 16)
data(os.path.join(out, "val.tsv"), 500, 2, 16)
data(os.path.join(out, "other.tsv"), 500, 3, 24)
data(os.path.join(out, "test.tsv"), 1000, 4, 16)
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=5 + len(words), hidden_size=64, num_hidden_layers=4,
                                 num_attention_heads=8, intermediate_size=256,
                                 max_position_embeddings=64)
base = os.path.join(out, "base")
transformers.BertForMaskedLM(config).save_pretrained(base, safe_serialization=True)
with open(os.path.join(base, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
PYEOF
# A new model: no analysis of an earlier one may be resumed (analyze heads resumes from OUT/passes.jsonl).
rm -rf "$OUT/run" "$OUT"/*.time "$OUT/analysis" "$OUT/analysis-exact" "$OUT/pruned" \
  "$OUT/over-training"
AK=("$BUILD/attnkit" --threads 2)
timed() { local name="$1"; shift; /usr/bin/time -o "$OUT/$name.time" -v "${AK[@]}" "$@"; }
timed train train --init "$OUT/base" --task.name classification \
  --task.data "$OUT/train.tsv" --task.batch_size 32 --task.truncate 32 --run.steps 600 \
  --run.checkpoint_every 100 --run.eval_every 100 --run.keep_last 6 --optimizer.lr 5e-4 \
  --run.dir "$OUT/run"
# The best checkpoint by validation accuracy (the run directory's best) is the model.
"${AK[@]}" eval --run "$OUT/run" --checkpoint best --split test --examples 0 > "$OUT/test-scores.txt"
timed heads analyze heads --model "$OUT/run" --tokenizer "$OUT/base" \
  --score-data "$OUT/val.tsv" --data "$OUT/test.tsv" --data2 "$OUT/other.tsv" \
  --fractions 10,20,30,40,50,60,70,80,90,100 --random-orders "$ORDERS" --out "$OUT/analysis"
timed exact analyze heads --model "$OUT/run" --tokenizer "$OUT/base" \
  --score-data "$OUT/val.tsv" --data "$OUT/test.tsv" --fractions 10,20,30,40,50,60,70,80,90,100 \
  --exact --no-ablation --random-orders 1 --out "$OUT/analysis-exact"
timed prune prune --model "$OUT/run" --fraction 0.5 \
  --importance "$OUT/analysis/heads.json" --out "$OUT/pruned"
timed over-training analyze heads --run "$OUT/run" --tokenizer "$OUT/base" \
  --score-data "$OUT/val.tsv" --data "$OUT/test.tsv" --fractions 10,30,50,70,90 \
  --random-orders "$ORDERS" --out "$OUT/over-training"
echo "heads_experiment.sh: $OUT/analysis/heads.json, $OUT/analysis-exact, $OUT/pruned, $OUT/over-training"
