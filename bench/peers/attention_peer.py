#!/usr/bin/python3
"""PyTorch-eager peer of attnkit_bench_attention: times ONE case, prints one JSON line.

    /usr/bin/python3 bench/peers/attention_peer.py --kind softmax|linear|cosformer --n N
        --mode fwd|fwdbwd [--causal] [--repeat R] [--min-time S] [--max-time S] [--threads T]
        [--batch B] [--heads H] [--dim D] [--check]

The attention functions below are the formulas written the natural way in eager PyTorch (what a
user would write without a fused kernel); bench/torch_ops_vs_eager.py imports them too. The CLI,
the sampling rule and the JSON fields mirror bench/attention_bench.cpp (see its header for the
definition of baseline / peak / extra peak memory and of the samples). --check: no timing;
compare output and input gradients on a small case with the float64 oracle
(bench/peers/peer_check.py) and print the errors as one JSON line.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_check  # noqa: E402

FEATURE_EPSILON = 1e-6


# --------------------------------------------------------------------------------------------
# Eager formulas. Layout [batch, heads, seq, dim].

def softmax_attention(q, k, v, causal=False):
    """softmax(q kᵀ / √d + causal -inf mask) v."""
    n, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if causal:
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def feature_attention(fq, fk, v, causal, clamp_denominator):
    """φq·(Σ φk vᵀ) / (φq·Σ φk), sums over all keys or (causal) over keys j <= i."""
    if causal:
        # The natural causal form: prefix sums of the outer products φk ⊗ v, [b, h, n, m, d].
        kv = torch.einsum("bhnd,bhne->bhnde", fk, v).cumsum(2)
        num = torch.einsum("bhnd,bhnde->bhne", fq, kv)
        den = torch.einsum("bhnd,bhnd->bhn", fq, fk.cumsum(2))
    else:
        num = fq @ (fk.transpose(-2, -1) @ v)
        den = (fq @ fk.sum(2).unsqueeze(-1)).squeeze(-1)
    den = den.clamp_min(FEATURE_EPSILON) if clamp_denominator else den + FEATURE_EPSILON
    return num / den.unsqueeze(-1)


def elu_features(x):
    return F.elu(x) + 1


def linear_attention(q, k, v, causal=False):
    """Katharopoulos et al.: elu+1 features, denominator + 1e-6."""
    return feature_attention(elu_features(q), elu_features(k), v, causal, clamp_denominator=False)


def cosformer_features(x):
    """[relu(x)·cos(πi/2M), relu(x)·sin(πi/2M)], positions i = 1..n, M = n."""
    n = x.shape[-2]
    angle = (math.pi / 2 / n) * torch.arange(1, n + 1, dtype=x.dtype).unsqueeze(-1)
    r = F.relu(x)
    return torch.cat([r * torch.cos(angle), r * torch.sin(angle)], dim=-1)


def cosformer_attention(q, k, v, causal=False):
    """cosFormer: cos re-weighted ReLU features, denominator clamped at 1e-6."""
    return feature_attention(cosformer_features(q), cosformer_features(k), v, causal,
                             clamp_denominator=True)


EAGER = {"softmax": softmax_attention, "linear": linear_attention,
         "cosformer": cosformer_attention}


# --------------------------------------------------------------------------------------------
# Measurement (mirrors bench/attention_bench.cpp).

def mib(nbytes):
    return nbytes / (1024.0 * 1024.0)


def current_rss_bytes():
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGESIZE")


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # KiB on Linux


def take_samples(one_call, repeat, min_time, max_time):
    """The sampling rule of bench/attention_bench.cpp; one_call() returns seconds.

    Returns (first call seconds, samples): the first call counts only when it took >= max_time/2;
    then samples until >= repeat of them and >= min_time in total, starting none that would pass
    max_time (predicted by the previous sample)."""
    first = one_call()
    samples = [first] if first >= max_time / 2 else []
    total = sum(samples)
    while not samples or ((len(samples) < repeat or total < min_time)
                          and total + samples[-1] <= max_time):
        samples.append(one_call())
        total += samples[-1]
    return first, samples


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=sorted(EAGER), default="softmax")
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--mode", choices=["fwd", "fwdbwd"], default="fwd")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--check", action="store_true", help="compare with the float64 oracle")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-time", type=float, default=1.0)
    p.add_argument("--max-time", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.check:
        op = lambda q, k, v: EAGER[a.kind](q, k, v, causal=a.causal)  # noqa: E731
        peer_check.print_check("eager", a.kind, a.causal, peer_check.check(op, a.kind, a.causal))
        return
    torch.manual_seed(0)
    backward = a.mode == "fwdbwd"
    shape = (a.batch, a.heads, a.n, a.dim)
    q, k, v = (torch.randn(shape, requires_grad=backward) for _ in range(3))
    grad_out = torch.randn(shape) if backward else None
    op = EAGER[a.kind]

    def one_call():
        start = time.perf_counter()
        out = op(q, k, v, causal=a.causal)
        if backward:
            out.backward(grad_out)
            q.grad = k.grad = v.grad = None
        del out
        return time.perf_counter() - start

    baseline = current_rss_bytes()
    first, samples = take_samples(one_call, a.repeat, a.min_time, a.max_time)
    peak = peak_rss_bytes()

    print(json.dumps({
        "impl": "peer", "kind": a.kind, "n": a.n, "mode": a.mode, "causal": a.causal,
        "batch": a.batch, "heads": a.heads, "dim": a.dim, "threads": torch.get_num_threads(),
        "runs": len(samples), "first_call_ms": first * 1e3,
        "median_ms": statistics.median(samples) * 1e3, "best_ms": min(samples) * 1e3,
        "baseline_rss_mib": mib(baseline), "peak_rss_mib": mib(peak),
        "extra_peak_mib": mib(max(0.0, peak - baseline)),
    }), flush=True)


if __name__ == "__main__":
    main()
