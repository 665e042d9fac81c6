"""Float64 oracle and the check every benchmark peer passes before it is timed.

Imported by bench/peers/attention_peer.py (PyTorch 1.13) and bench/peers/torch2_peer.py
(PyTorch 2.x): `--check` on either runs check() on a small case and prints one JSON line; compare.py
runs it for each (peer, kind, causal) and times no peer that failed.

The oracle is the textbook formula with an explicit n×n matrix and an explicit causal mask, in
float64; no feature concatenation, no prefix sums (the things the peers do):
  softmax    softmax(q kᵀ/√d, -inf above the diagonal when causal) v
  linear     A = φ(q) φ(k)ᵀ, φ = elu+1, masked to 0 above the diagonal; A v / (A·1 + 1e-6)
  cosformer  A_ij = relu(q_i)·relu(k_j) · cos(π (i-j) / 2n), masked; A v / max(A·1, 1e-6)
             (= the cos/sin feature product, by cos(a-b) = cos a cos b + sin a sin b)
"""
import json
import math

import torch
import torch.nn.functional as F

CHECK_SHAPE = dict(batch=2, heads=3, n=37, dim=16)
RTOL, ATOL = 1e-3, 1e-4  # relative to the largest |reference| value of each tensor


def oracle(kind, q, k, v, causal):
    """[batch, heads, n, dim] float64 in, float64 out."""
    n = q.shape[-2]
    position = torch.arange(n, dtype=torch.float64)
    future = position.unsqueeze(1) < position.unsqueeze(0)  # [i, j]: j > i
    if kind == "softmax":
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v
    if kind == "linear":
        a = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)
        if causal:
            a = a.masked_fill(future, 0.0)
        return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)
    a = F.relu(q) @ F.relu(k).transpose(-2, -1)
    a = a * torch.cos(math.pi / 2 / n * (position.unsqueeze(1) - position.unsqueeze(0)))
    if causal:
        a = a.masked_fill(future, 0.0)
    return (a @ v) / a.sum(-1, keepdim=True).clamp_min(1e-6)


def max_error(x, reference):
    """max |x - reference| / (ATOL + RTOL·max|reference|): ≤ 1 passes."""
    return ((x.double() - reference).abs().max() /
            (ATOL + RTOL * reference.abs().max())).item()


def check(op, kind, causal, to_layout=lambda x: x, from_layout=lambda x: x):
    """Runs op (float32, its own layout) and the oracle on one small random case; compares the
    output and the gradients of q, k and v. to_layout/from_layout map [b, h, n, d] to the op's
    layout and back. Returns a dict with the errors (≤ 1 passes) and "ok"."""
    torch.manual_seed(1)
    shape = (CHECK_SHAPE["batch"], CHECK_SHAPE["heads"], CHECK_SHAPE["n"], CHECK_SHAPE["dim"])
    inputs = [torch.randn(shape, dtype=torch.float64) for _ in range(3)]
    grad_out = torch.randn(shape, dtype=torch.float64)

    reference = [x.clone().requires_grad_() for x in inputs]
    out_ref = oracle(kind, *reference, causal)
    out_ref.backward(grad_out)

    ours = [to_layout(x.float()).detach().requires_grad_() for x in inputs]
    out = op(*ours)
    out.backward(to_layout(grad_out.float()))
    errors = {"out": max_error(from_layout(out.detach()), out_ref.detach())}
    for name, x, r in zip("qkv", ours, reference):
        errors["grad_" + name] = max_error(from_layout(x.grad), r.grad)
    return {"errors": errors, "ok": all(e <= 1.0 for e in errors.values())}


def print_check(impl, kind, causal, result):
    print(json.dumps({"impl": impl, "kind": kind, "causal": causal, "check": True,
                      "shape": CHECK_SHAPE, **result}), flush=True)
