#!/usr/bin/python3
"""PyTorch peer of attnkit_bench_train: the same GPT-2-shaped causal LM and training step,
ONE case per process, one JSON line (same CLI and fields as bench/train_bench.cpp).

Model: token + learned position embeddings, pre-LN blocks (LayerNorm eps 1e-5, fused q|k|v
projection, attention, output projection, MLP 4·hidden with tanh gelu), final LayerNorm, LM head
tied to the token embeddings, dropout 0. AdamW lr 1e-4, weight decay 0.01 on matrices.

--attention eager (default; runs under Debian's python3-torch 1.13 or any torch): attention
written the natural eager way (bench/peers/attention_peer.py): softmax with an explicit n×n causal
mask, causal linear (elu+1) and cosFormer through cumulative sums of φ(k)⊗v, a d×d matrix per
position.
--attention best (PyTorch 2.x with fast-transformers' kernel: the bench venv, scripts/bench_venv.sh):
each kind's best peer (bench/peers/torch2_peer.py): softmax = scaled_dot_product_attention with
is_causal (PyTorch's flash kernel on CPU); linear = fast-transformers' CausalLinearAttention math
around its compiled CPU causal-product kernel; cosFormer = cosFormer's features through that kernel.
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_peer  # noqa: E402


def attention(kind, q, k, v):
    """Eager attention on [batch, heads, n, dim]."""
    if kind == "softmax":
        return attention_peer.softmax_attention(q, k, v, causal=True)
    if kind == "linear":
        return attention_peer.linear_attention(q, k, v, causal=True)
    return attention_peer.cosformer_attention(q, k, v, causal=True)


def best_attention(kind, q, k, v):
    """The best peer per kind (torch2_peer's): q, k, v and the result in [batch, n, heads, dim]."""
    import torch2_peer
    if kind == "softmax":
        return torch2_peer.sdpa(*(x.transpose(1, 2) for x in (q, k, v)), True).transpose(1, 2)
    op = torch2_peer.ft_linear if kind == "linear" else torch2_peer.ft_cosformer
    return op(q, k, v, True)


class Block(nn.Module):
    def __init__(self, hidden, heads, kind, best=False):
        super().__init__()
        self.heads, self.kind, self.best = heads, kind, best
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-5), nn.LayerNorm(hidden, eps=1e-5)
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc, self.proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, n, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        if self.best:
            split = lambda t: t.view(b, n, self.heads, h // self.heads)  # noqa: E731
            ctx = best_attention(self.kind, split(q), split(k), split(v)).reshape(b, n, h)
        else:
            split = lambda t: t.view(b, n, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
            ctx = attention(self.kind, split(q), split(k), split(v)).transpose(1, 2).reshape(b, n, h)
        x = x + self.out(ctx)
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab, n, hidden, layers, heads, kind, best=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(n, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, kind, best) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():  # GPT-2's init, as attnkit's preset: N(0, 0.02) matrices, zero biases
            for name, t in self.named_parameters():
                if t.dim() >= 2:
                    t.normal_(0.0, 0.02)
                elif name.endswith("bias") and "ln" not in name:
                    t.zero_()

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))[None]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def current_rss_mib():
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / 2**20


def adamw(model):
    """attnkit's AdamW set-up: weight decay 0.01 on matrices, none on vectors, lr 1e-4."""
    decay = [t for t in model.parameters() if t.dim() >= 2]
    rest = [t for t in model.parameters() if t.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                             lr=1e-4)


def timed_steps(step, warmup, steps):
    """Runs step() warmup times untimed, then steps times: (wall seconds, CPU seconds, last loss)."""
    for _ in range(warmup):
        step()
    t0, cpu0 = time.perf_counter(), time.process_time()
    loss = 0.0
    for _ in range(steps):
        loss = step()
    return time.perf_counter() - t0, time.process_time() - cpu0, loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", default="softmax", choices=("softmax", "linear", "cosformer"))
    p.add_argument("--attention", default="eager", choices=("eager", "best"))
    for name, default in (("n", 256), ("batch", 8), ("hidden", 256), ("layers", 4), ("heads", 4),
                          ("vocab", 8192), ("steps", 10), ("warmup", 2), ("threads", 2)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt2(a.vocab, a.n, a.hidden, a.layers, a.heads, a.kind, a.attention == "best")
    opt = adamw(model)
    ids = torch.randint(a.vocab, (a.batch, a.n))
    targets = ids[:, 1:]
    baseline = current_rss_mib()

    def step():
        opt.zero_grad()
        logits = model(ids)[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    seconds, _, loss = timed_steps(step, a.warmup, a.steps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"impl": "pytorch-eager" if a.attention == "eager" else "pytorch-best",
                      "torch": torch.__version__, "kind": a.kind, "n": a.n, "batch": a.batch, "steps": a.steps,
                      "step_ms": 1000 * seconds / a.steps, "tokens_per_s": a.batch * a.n * a.steps / seconds,
                      "extra_peak_mib": peak - baseline, "loss": loss, "threads": a.threads}))


if __name__ == "__main__":
    main()
