#!/usr/bin/env python3
"""PyTorch 2.x peers of attnkit_bench_attention: times ONE case, prints one JSON line.

Runs under the bench venv's python (scripts/bench_venv.sh), not Debian's torch 1.13:

    ~/.cache/attnkit/venv-bench/bin/python bench/peers/torch2_peer.py --impl IMPL --kind KIND
        --n N --mode fwd|fwdbwd [--causal] [--check] [--threads T] ...

IMPL, what a user would pick instead of attnkit:
  sdpa               softmax: torch.nn.functional.scaled_dot_product_attention (is_causal for the
                     causal case; on CPU, float32, no mask, PyTorch runs its flash kernel).
  fast-transformers  linear: fast-transformers 0.4.0's attention math around its CPU kernel:
                     causal = CausalLinearAttention (elu+1 features, normaliser from the cumsum of
                     φ(k), numerator from the compiled causal-product kernel on permuted, contiguous
                     copies, inputs in its [batch, n, heads, dim] layout); non-causal =
                     LinearAttention (three einsums, no kernel). cosformer, causal only: cosFormer's
                     cos/sin-reweighted ReLU features through the same causal-product kernel.
  cosformer          cosformer: the cosFormer authors' PyTorch formulation (relu features, [sin, cos]
                     reweighting with angle π·i/2n, non-causal via two matrix products, causal via
                     cumsum of φ(k)⊗v and of φ(k), denominator clamped at 1e-6), written here in
                     PyTorch 2.x eager.

--check: no timing; compare output and input gradients on a small case with the float64 oracle
(bench/peers/peer_check.py) and print the errors. The CLI, the sampling rule and the JSON fields
are those of bench/peers/attention_peer.py and bench/attention_bench.cpp.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_peer import current_rss_bytes, mib, peak_rss_bytes, take_samples  # noqa: E402
import peer_check  # noqa: E402

EPS = 1e-6


# --------------------------------------------------------------------------------------------
# Peers. Each takes (q, k, v, causal) in its own layout; LAYOUT says which.

def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def ft_linear(q, k, v, causal):
    """fast-transformers' CausalLinearAttention / LinearAttention forward, [N, L, H, E]."""
    import fast_transformers_kernel
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    if causal:
        # Its key-length mask: all keys valid here, but the multiply is part of its forward.
        fk = fk * torch.ones(fk.shape[:2], dtype=fk.dtype)[:, :, None, None]
        z = 1 / (torch.einsum("nlhi,nlhi->nlh", fq, fk.cumsum(1)) + EPS)
        return fast_transformers_kernel.causal_product(fq, fk, v) * z[:, :, :, None]
    kv = torch.einsum("nshd,nshm->nhmd", fk, v)
    z = 1 / (torch.einsum("nlhd,nhd->nlh", fq, fk.sum(dim=1)) + EPS)
    return torch.einsum("nlhd,nhmd,nlh->nlhm", fq, kv, z)


def ft_cosformer(q, k, v, causal):
    """cosFormer's features through fast-transformers' causal-product kernel, [N, L, H, E]."""
    import fast_transformers_kernel
    assert causal, "fast-transformers' kernel is the causal product"
    n = q.shape[1]
    angle = (math.pi / 2 / n) * torch.arange(1, n + 1, dtype=q.dtype).reshape(1, n, 1, 1)
    sin, cos = torch.sin(angle), torch.cos(angle)
    rq, rk = F.relu(q), F.relu(k)
    fq = torch.cat([rq * sin, rq * cos], dim=-1)
    fk = torch.cat([rk * sin, rk * cos], dim=-1)
    den = torch.clamp_min(torch.einsum("nlhi,nlhi->nlh", fq, fk.cumsum(1)), EPS)
    return fast_transformers_kernel.causal_product(fq, fk, v) / den[:, :, :, None]


def cosformer_official(q, k, v, causal):
    """The cosFormer authors' math, on [batch·heads, n, dim] as their code does, [B, H, n, d]."""
    b, h, n, d = q.shape
    q, k, v = (x.reshape(b * h, n, d) for x in (F.relu(q), F.relu(k), v))
    index = (math.pi / 2) * torch.arange(1, n + 1, dtype=q.dtype).reshape(1, -1, 1)
    sin, cos = torch.sin(index / n), torch.cos(index / n)
    q_ = torch.cat([q * sin, q * cos], dim=-1)
    k_ = torch.cat([k * sin, k * cos], dim=-1)
    if causal:
        kv_cum = torch.cumsum(torch.einsum("nld,nlm->nldm", k_, v), dim=1)
        qkv = torch.einsum("nld,nldm->nlm", q_, kv_cum)
        denom = torch.clamp_min(torch.einsum("nlm,nlm->nl", q_, torch.cumsum(k_, dim=1)), EPS)
        out = qkv / denom.unsqueeze(-1)
    else:
        kv_ = torch.einsum("nld,nlm->ndm", k_, v)
        z_ = 1 / torch.clamp_min(torch.einsum("nld,nd->nl", q_, torch.sum(k_, dim=1)), EPS)
        out = torch.einsum("nld,ndm,nl->nlm", q_, kv_, z_)
    return out.reshape(b, h, n, d)


# impl -> kind -> (op, layout); layout "bnhd" = fast-transformers' [batch, n, heads, dim].
PEERS = {
    "sdpa": {"softmax": (sdpa, "bhnd")},
    "fast-transformers": {"linear": (ft_linear, "bnhd"), "cosformer": (ft_cosformer, "bnhd")},
    "cosformer": {"cosformer": (cosformer_official, "bhnd")},
}


def supports(impl, kind, causal):
    """Whether IMPL has a peer for this case (fast-transformers' cosFormer is causal only)."""
    return kind in PEERS.get(impl, {}) and (causal or (impl, kind) != ("fast-transformers",
                                                                        "cosformer"))


def layout_maps(layout):
    if layout == "bhnd":
        return (lambda x: x), (lambda x: x)
    return (lambda x: x.transpose(1, 2).contiguous()), (lambda x: x.transpose(1, 2))


# --------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", choices=sorted(PEERS), required=True)
    p.add_argument("--kind", choices=["softmax", "linear", "cosformer"], default="softmax")
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
    if not supports(a.impl, a.kind, a.causal):
        sys.exit(f"torch2_peer.py: no {a.impl} peer for {'causal ' if a.causal else ''}{a.kind}")
    torch.set_num_threads(a.threads)
    fn, layout = PEERS[a.impl][a.kind]
    to_layout, from_layout = layout_maps(layout)
    op = lambda q, k, v: fn(q, k, v, a.causal)  # noqa: E731
    if a.check:
        peer_check.print_check(a.impl, a.kind, a.causal,
                               peer_check.check(op, a.kind, a.causal, to_layout, from_layout))
        return

    torch.manual_seed(0)
    backward = a.mode == "fwdbwd"
    shape = (a.batch, a.heads, a.n, a.dim) if layout == "bhnd" else (a.batch, a.n, a.heads, a.dim)
    q, k, v = (torch.randn(shape, requires_grad=backward) for _ in range(3))
    grad_out = torch.randn(shape) if backward else None
    if a.impl == "fast-transformers":
        import fast_transformers_kernel
        fast_transformers_kernel.CausalDotProduct.module = fast_transformers_kernel.load()

    def one_call():
        start = time.perf_counter()
        with torch.set_grad_enabled(backward):
            out = op(q, k, v)
            if backward:
                out.backward(grad_out)
                q.grad = k.grad = v.grad = None
        del out
        return time.perf_counter() - start

    baseline = current_rss_bytes()
    first, samples = take_samples(one_call, a.repeat, a.min_time, a.max_time)
    peak = peak_rss_bytes()
    print(json.dumps({
        "impl": a.impl, "kind": a.kind, "n": a.n, "mode": a.mode, "causal": a.causal,
        "batch": a.batch, "heads": a.heads, "dim": a.dim, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "runs": len(samples), "first_call_ms": first * 1e3,
        "median_ms": statistics.median(samples) * 1e3, "best_ms": min(samples) * 1e3,
        "baseline_rss_mib": mib(baseline), "peak_rss_mib": mib(peak),
        "extra_peak_mib": mib(max(0.0, peak - baseline)),
    }), flush=True)


if __name__ == "__main__":
    main()
