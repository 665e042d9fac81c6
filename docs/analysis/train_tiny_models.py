#!/usr/bin/python3
"""Train two tiny Hugging Face-layout models on Debian's fortunes, for docs/analysis.md.

attnkit has no trainer yet, so these are trained with python3-torch 1.13 through the functional
BERT / GPT-2 forwards of tests/python/hf_reference.py (the independent reference attnkit's HF
loader is tested against) and written as HF directories (config.json + model.safetensors) with
tokenizers trained by `attnkit tokenizer train`:
  OUT/gpt2   causal LM, byte-level BPE (next-token cross entropy, tied output embedding)
  OUT/bert   masked LM, WordPiece (15% of tokens -> [MASK], tied decoder on the last hidden state)
  OUT/heldout.txt  lines not trained on, for `attnkit analyze collapse --data`

Run: /usr/bin/python3 docs/analysis/train_tiny_models.py --attnkit build/attnkit --out DIR
"""
import argparse
import glob
import math
import os
import random
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
import hf_reference as hf  # noqa: E402


def fortunes_lines():
    lines = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line and line != "%":
                    lines.append(line)
    return lines


def tokenize(attnkit, tokenizer_dir, lines):
    r = subprocess.run([attnkit, "tokenize", "--tokenizer", tokenizer_dir],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    ids = []
    for row in r.stdout.splitlines():
        ids.extend(int(t) for t in row.split())
    return torch.tensor(ids, dtype=torch.long)


def windows(stream, batch, n, gen):
    starts = torch.randint(0, stream.numel() - n - 1, (batch,), generator=gen)
    return torch.stack([stream[s:s + n + 1] for s in starts.tolist()])


def vocab_size(tokenizer_dir):
    import json
    with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
        model = json.load(f)["model"]
    return len(model["vocab"])


def train(kind, cfg, base, stream, steps, seq, batch, lr, mask_id=None, special=()):
    p = {k: v.clone().requires_grad_(True) for k, v in base.items()}
    opt = torch.optim.Adam(p.values(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    wte = "wte.weight" if kind == "gpt2" else "embeddings.word_embeddings.weight"
    started = time.time()
    for step in range(1, steps + 1):
        lr_now = lr * min(1.0, step / 50) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr_now
        w = windows(stream, batch, seq, gen)
        if kind == "gpt2":
            out = hf.gpt2_forward(cfg, p, {}, w[:, :-1])
            logits, target = out["logits"], w[:, 1:]
        else:
            inputs, target = w[:, :-1].clone(), w[:, :-1].clone()
            chosen = torch.rand(inputs.shape, generator=gen) < 0.15
            for s in special:
                chosen &= inputs != s
            inputs[chosen] = mask_id
            target[~chosen] = -100
            x = hf.bert_forward(cfg, p, {}, inputs)["last_hidden_state"]
            logits = x @ p[wte].t()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 target.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == 1:
            print(f"{kind} step {step}/{steps} loss {loss.item():.3f} ({time.time() - started:.0f}s)",
                  flush=True)
    return {k: v.detach() for k, v in p.items()}, loss.item()


def save(out_dir, cfg, weights, tokenizer_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        f.write(hf.config_json_text(cfg))
    hf.save_safetensors(os.path.join(out_dir, "model.safetensors"), weights, {"format": "pt"})
    for name in os.listdir(tokenizer_dir):
        with open(os.path.join(tokenizer_dir, name), "rb") as src, \
                open(os.path.join(out_dir, name), "wb") as dst:
            dst.write(src.read())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--attnkit", default="build/attnkit")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared 2-core machine: one thread trains fastest
    lines = fortunes_lines()
    random.Random(0).shuffle(lines)
    split = int(len(lines) * 0.95)
    os.makedirs(args.out, exist_ok=True)
    train_txt, heldout_txt = os.path.join(args.out, "train.txt"), os.path.join(args.out, "heldout.txt")
    with open(train_txt, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:split]) + "\n")
    with open(heldout_txt, "w", encoding="utf-8") as f:
        f.write("\n".join(lines[split:]) + "\n")
    print(f"{len(lines)} fortune lines, {split} for training", flush=True)
    seq, batch = 64, 16
    # WordPiece keeps every character of the corpus as a token: a larger vocabulary.
    for kind, tok_kind, size in (("gpt2", "bpe", 2000), ("bert", "wordpiece", 8000)):
        if os.path.exists(os.path.join(args.out, kind, "model.safetensors")):
            print(f"{kind}: {os.path.join(args.out, kind)} exists, kept", flush=True)
            continue
        tok_dir = os.path.join(args.out, f"tokenizer-{kind}")
        subprocess.run([args.attnkit, "tokenizer", "train", "--kind", tok_kind, "--vocab-size",
                        str(size), "--out", tok_dir, train_txt], check=True, capture_output=True)
        v = vocab_size(tok_dir)
        stream = tokenize(args.attnkit, tok_dir, lines[:split])
        print(f"{kind}: vocabulary {v}, {stream.numel()} training tokens", flush=True)
        if kind == "gpt2":
            cfg = hf.make_config("gpt2", vocab_size=v, n_embd=args.hidden, n_layer=args.layers,
                                 n_head=args.heads, n_positions=128)
            base, _ = hf._random_weights("gpt2", cfg, 0, 0.02)
            weights, loss = train(kind, cfg, base, stream, args.steps, seq, batch, 3e-3)
        else:
            cfg = hf.make_config("bert", vocab_size=v, hidden_size=args.hidden,
                                 num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                 intermediate_size=4 * args.hidden, max_position_embeddings=128)
            base, _ = hf._random_weights("bert", cfg, 0, 0.02)
            vocab = open(os.path.join(tok_dir, "vocab.txt"), encoding="utf-8").read().split("\n")
            special = [vocab.index(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[UNK]")]
            weights, loss = train(kind, cfg, base, stream, args.steps, seq, batch, 2e-3,
                                  mask_id=vocab.index("[MASK]"), special=special)
        save(os.path.join(args.out, kind), cfg, weights, tok_dir)
        print(f"{kind}: final training loss {loss:.3f}, saved to {os.path.join(args.out, kind)}",
              flush=True)


if __name__ == "__main__":
    main()
