#!/usr/bin/env bash
# The experiment of docs/analysis.md ("Attention heads"): a random-init BERT saved by Hugging Face
# transformers (test venv), fine-tuned with `attnkit train --init` on a synthetic sentiment task
# (label = more positive than negative words among 16), then `attnkit analyze heads`, `attnkit
# prune` and `attnkit analyze heads --run`. Usage: bash scripts/heads_experiment.sh BUILD OUT
set -euo pipefail
BUILD="${1:-build}"
OUT="${2:-runs/heads}"
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
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=5 + len(words), hidden_size=64, num_hidden_layers=4,
                                 num_attention_heads=8, intermediate_size=256,
                                 max_position_embeddings=64)
base = os.path.join(out, "base")
transformers.BertForMaskedLM(config).save_pretrained(base, safe_serialization=True)
with open(os.path.join(base, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
PYEOF
rm -rf "$OUT/run"
"$BUILD/attnkit" --threads 2 train --init "$OUT/base" --task.name classification \
  --task.data "$OUT/train.tsv" --task.batch_size 32 --task.truncate 32 --run.steps 600 \
  --run.checkpoint_every 100 --run.eval_every 100 --optimizer.lr 5e-4 --run.dir "$OUT/run"
last="$(ls -d "$OUT"/run/checkpoints/step-* | sort | tail -1)"
"$BUILD/attnkit" --threads 2 analyze heads --model "$last" --tokenizer "$OUT/base" \
  --data "$OUT/val.tsv" --data2 "$OUT/other.tsv" --fractions 10,20,30,40,50,60,70,80,90,100 \
  --out "$OUT/analysis"
"$BUILD/attnkit" --threads 2 analyze heads --model "$last" --tokenizer "$OUT/base" \
  --data "$OUT/val.tsv" --fractions 10,20,30,40,50,60,70,80,90,100 --exact --no-ablation \
  --out "$OUT/analysis-exact"
"$BUILD/attnkit" --threads 2 prune --model "$last" --fraction 0.5 \
  --importance "$OUT/analysis/heads.json" --out "$OUT/pruned"
"$BUILD/attnkit" --threads 2 analyze heads --run "$OUT/run" --tokenizer "$OUT/base" \
  --data "$OUT/val.tsv" --fractions 10,30,50,70,90 --out "$OUT/over-training"
