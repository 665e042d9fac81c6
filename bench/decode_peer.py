#!/usr/bin/python3
"""The peer of bench/decode_bench.cpp --mode greedy: GPT-2 greedy decoding with a KV cache in
python3-torch eager (the loop Hugging Face's generate runs, written out: past keys/values
concatenated per step), same shape, batch 1, same threads. Random weights, or --model DIR: a
Hugging Face GPT-2 directory's model.safetensors (the weights attnkit and CTranslate2 run; read
here without the safetensors package). Prints one JSON line with the generated ids and their
summed log-probability."""
import argparse
import json
import math
import os
import struct
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


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[start:end]), dtype=dtypes[info["dtype"]])
        out[name.removeprefix("transformer.")] = t.view(info["shape"])
    return out


def load_hf(model, directory):
    """GPT-2's Conv1D weights are [in, out]: transposed into nn.Linear's [out, in]."""
    w = read_safetensors(os.path.join(directory, "model.safetensors"))
    with torch.no_grad():
        model.wte.weight.copy_(w["wte.weight"])
        model.wpe.weight.copy_(w["wpe.weight"][: model.wpe.weight.shape[0]])
        model.ln_f.weight.copy_(w["ln_f.weight"])
        model.ln_f.bias.copy_(w["ln_f.bias"])
        for i, b in enumerate(model.blocks):
            p = f"h.{i}."
            for mine, theirs in ((b.ln1, "ln_1"), (b.ln2, "ln_2")):
                mine.weight.copy_(w[p + theirs + ".weight"])
                mine.bias.copy_(w[p + theirs + ".bias"])
            for mine, theirs in ((b.qkv, "attn.c_attn"), (b.proj, "attn.c_proj"),
                                 (b.fc, "mlp.c_fc"), (b.out, "mlp.c_proj")):
                mine.weight.copy_(w[p + theirs + ".weight"].t())
                mine.bias.copy_(w[p + theirs + ".bias"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--model", default="", help="Hugging Face GPT-2 directory")
    parser.add_argument("--prompt", default="", help="prompt ids, comma-separated")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt2(a.vocab, a.hidden, a.layers, a.heads, a.prompt_tokens + a.new_tokens + 1).eval()
    prompt = torch.randint(a.vocab, (1, a.prompt_tokens))
    if a.prompt:
        prompt = torch.tensor([[int(i) for i in a.prompt.split(",")]])
        a.prompt_tokens = prompt.shape[1]
    if a.model:
        load_hf(model, a.model)

    def generate(n):
        logits, past = model(prompt, 0, None)
        out, score = [], 0.0
        for t in range(n):
            nxt = logits.argmax(-1, keepdim=True)
            out.append(int(nxt))
            score += float(logits[0].log_softmax(-1)[out[-1]])
            if t + 1 == n:
                break
            logits, past = model(nxt, a.prompt_tokens + t, past)
        return out, score

    with torch.no_grad():
        generate(4)
        t0 = time.perf_counter()
        out, score = generate(a.new_tokens)
        elapsed = time.perf_counter() - t0
    print(json.dumps({"mode": "greedy", "peer": "python3-torch eager KV cache",
                      "new_tokens": len(out), "seconds": elapsed,
                      "tokens_per_s": len(out) / elapsed, "ids": out, "score": score,
                      "threads": a.threads}))


if __name__ == "__main__":
    main()
