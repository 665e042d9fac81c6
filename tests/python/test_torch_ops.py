#!/usr/bin/python3
"""torch.ops.attnkit.* from Python torch (python3-torch 1.13): forward and backward against eager
formulas written here, independently of attnkit."""
import math
import os
import sys
import unittest

import torch

BUILD_DIR = "build"


def load():
    torch.ops.load_library(os.path.join(BUILD_DIR, "libattnkit_ops.so"))
    return torch.ops.attnkit


def eager_softmax(q, k, v, mask=None, causal=False, scale=None):
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = q @ k.transpose(-2, -1) * scale
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal:
        allowed = torch.ones(L, S).tril(S - L).bool()
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask
    elif mask is not None:
        logits = logits + mask
    logits = logits.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(logits, -1).nan_to_num(0.0)  # fully masked rows -> 0
    return w @ v


def eager_linear(q, k, v, phi, causal=False):
    fq, fk = phi(q), phi(k)
    w = fq @ fk.transpose(-2, -1)
    if causal:
        w = w.tril(k.shape[-2] - q.shape[-2])
    return (w @ v) / (w.sum(-1, keepdim=True) + 1e-6)


def eager_cosformer(q, k, v, causal=False):
    L, S = q.shape[-2], k.shape[-2]
    M = max(L, S)
    qi = torch.arange(1, L + 1, dtype=q.dtype) + (S - L if causal else 0)
    kj = torch.arange(1, S + 1, dtype=q.dtype)
    cos = torch.cos(math.pi / 2 * (qi[:, None] - kj[None, :]) / M)
    w = (torch.relu(q) @ torch.relu(k).transpose(-2, -1)) * cos
    if causal:
        w = w.tril(S - L)
    return (w @ v) / w.sum(-1, keepdim=True).clamp_min(1e-6)


def favor_phi(w):
    def phi(x):
        d = x.shape[-1]
        xs = x * d ** -0.25
        return torch.exp(xs @ w.to(x.dtype).t() - (xs * xs).sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[0])
    return phi


class TorchOps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ops = load()

    def check(self, fn, ref, shapes, rtol=1e-4, atol=1e-5):
        torch.manual_seed(0)
        xs = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]
        out, expect = fn(*xs), ref(*xs)
        self.assertEqual(out.shape, expect.shape)
        self.assertTrue(torch.allclose(out, expect, rtol=rtol, atol=atol),
                        f"forward max err {(out - expect).abs().max().item()}")
        g = torch.randn_like(out)
        got = torch.autograd.grad(out, xs, g)
        want = torch.autograd.grad(expect, xs, g)
        for a, b in zip(got, want):
            self.assertTrue(torch.allclose(a, b, rtol=rtol, atol=atol),
                            f"grad max err {(a - b).abs().max().item()}")
        # Gradcheck against finite differences through the registered op itself.
        self.assertTrue(torch.autograd.gradcheck(fn, xs, eps=1e-6, atol=1e-5))

    def test_softmax(self):
        for causal in (False, True):
            self.check(lambda q, k, v: self.ops.softmax_attention(q, k, v, None, causal, None),
                       lambda q, k, v: eager_softmax(q, k, v, causal=causal),
                       [(2, 3, 7, 16), (2, 3, 9, 16), (2, 3, 9, 5)])

    def test_softmax_mask_and_scale(self):
        mask = torch.rand(7, 9) > 0.4
        mask[2] = False
        self.check(lambda q, k, v: self.ops.softmax_attention(q, k, v, mask, False, 0.2),
                   lambda q, k, v: eager_softmax(q, k, v, mask=mask, scale=0.2),
                   [(1, 2, 7, 8), (1, 2, 9, 8), (1, 2, 9, 4)])
        bias = torch.randn(1, 2, 7, 9, dtype=torch.float64)
        self.check(lambda q, k, v: self.ops.softmax_attention(q, k, v, bias),
                   lambda q, k, v: eager_softmax(q, k, v, mask=bias),
                   [(1, 2, 7, 8), (1, 2, 9, 8), (1, 2, 9, 4)])

    def test_linear(self):
        phis = {"elu": lambda x: torch.nn.functional.elu(x) + 1, "relu": torch.relu}
        for name, phi in phis.items():
            for causal in (False, True):
                self.check(lambda q, k, v: self.ops.linear_attention(q, k, v, name, causal),
                           lambda q, k, v: eager_linear(q, k, v, phi, causal),
                           [(2, 2, 11, 8), (2, 2, 11, 8), (2, 2, 11, 6)])

    def test_linear_favor(self):
        w = self.ops.favor_projection(8, 24, 5)
        self.assertEqual(tuple(w.shape), (24, 8))
        for causal in (False, True):
            self.check(lambda q, k, v: self.ops.linear_attention(q * 0.5, k * 0.5, v, "favor:24:5", causal),
                       lambda q, k, v: eager_linear(q * 0.5, k * 0.5, v, favor_phi(w), causal),
                       [(1, 2, 10, 8), (1, 2, 10, 8), (1, 2, 10, 3)])

    def test_cosformer(self):
        for causal in (False, True):
            self.check(lambda q, k, v: self.ops.cosformer_attention(q, k, v, causal),
                       lambda q, k, v: eager_cosformer(q, k, v, causal),
                       [(2, 3, 13, 8), (2, 3, 13, 8), (2, 3, 13, 4)])
        # cross attention, L != S
        self.check(lambda q, k, v: self.ops.cosformer_attention(q, k, v, False),
                   lambda q, k, v: eager_cosformer(q, k, v, False),
                   [(1, 2, 5, 8), (1, 2, 12, 8), (1, 2, 12, 4)])

    def test_float32(self):
        torch.manual_seed(1)
        q, k, v = (torch.randn(1, 4, 64, 32) for _ in range(3))
        out = self.ops.cosformer_attention(q, k, v, True)
        self.assertEqual(out.dtype, torch.float32)
        self.assertTrue(torch.allclose(out.double(), eager_cosformer(q.double(), k.double(), v.double(), True),
                                       rtol=1e-4, atol=1e-5))

    def test_bad_input_is_a_clear_error(self):
        q = torch.randn(1, 2, 4, 8)
        with self.assertRaisesRegex(RuntimeError, r"k has shape \[1, 2, 4, 6\]"):
            self.ops.softmax_attention(q, torch.randn(1, 2, 4, 6), q)
        with self.assertRaisesRegex(RuntimeError, "unknown feature map 'tanh'"):
            self.ops.linear_attention(q, q, q, "tanh")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import runner
    BUILD_DIR = runner.build_dir()
    runner.run()
