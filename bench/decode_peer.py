#!/usr/bin/python3
"""The peer of bench/decode_bench.cpp --mode greedy: GPT-2 greedy decoding with a KV cache in
python3-torch eager (the loop Hugging Face's generate runs, written out: past keys/values
concatenated per step), same shape, random weights, batch 1, same threads. Prints one JSON line."""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.fc = torch.nn.Linear(hidden, 4 * hidden)
        self.out = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x, past):
        b, n, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        split = lambda t: t.view(b, n, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        if n > 1:
            s = k.shape[2]
            mask = torch.ones(n, s, dtype=torch.bool).tril(s - n)
            scores = scores.masked_fill(~mask, float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, h)
        x = x + self.proj(ctx)
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x, (k, v)


class Gpt2(torch.nn.Module):
    def __init__(self, vocab, hidden, layers, heads, positions):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, hidden)
        self.wpe = torch.nn.Embedding(positions, hidden)
        self.blocks = torch.nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(hidden, eps=1e-5)
        for p in self.parameters():
            torch.nn.init.normal_(p, std=0.02)

    def forward(self, ids, start, past):
        x = self.wte(ids) + self.wpe(torch.arange(start, start + ids.shape[1]))
        new = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, past[i] if past else None)
            new.append(kv)
        return self.ln_f(x[:, -1]) @ self.wte.weight.t(), new


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt2(a.vocab, a.hidden, a.layers, a.heads, a.prompt_tokens + a.new_tokens + 1).eval()
    prompt = torch.randint(a.vocab, (1, a.prompt_tokens))

    def generate(n):
        logits, past = model(prompt, 0, None)
        out = []
        for t in range(n):
            nxt = logits.argmax(-1, keepdim=True)
            out.append(int(nxt))
            if t + 1 == n:
                break
            logits, past = model(nxt, a.prompt_tokens + t, past)
        return out

    with torch.no_grad():
        generate(4)
        t0 = time.perf_counter()
        out = generate(a.new_tokens)
        elapsed = time.perf_counter() - t0
    print(json.dumps({"mode": "greedy", "peer": "python3-torch eager KV cache",
                      "new_tokens": len(out), "seconds": elapsed,
                      "tokens_per_s": len(out) / elapsed, "threads": a.threads}))


if __name__ == "__main__":
    main()
