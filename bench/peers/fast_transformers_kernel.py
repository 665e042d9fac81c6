#!/usr/bin/env python3
"""fast-transformers' CPU causal-product kernel, built from its PyPI source distribution.

    python bench/peers/fast_transformers_kernel.py --build   # build (or find) it, print its path

scripts/bench_venv.sh unpacks pytorch-fast-transformers under $ATTNKIT_CACHE/src/ (default
~/.cache/attnkit) and calls this under the bench venv's python. Only one file of it is compiled,
fast_transformers/causal_product/causal_product_cpu.cpp, with torch.utils.cpp_extension against
the running torch and the flags `pip install pytorch-fast-transformers` would use on this Python
(its setup.py adds -fopenmp -ffast-math to Python's -O2 -fwrapv -DNDEBUG). The build is cached
under $ATTNKIT_CACHE/build/, one folder per fast-transformers and torch version.
"""
import argparse
import os
import sys
from pathlib import Path

import torch

FT_VERSION = "0.4.0"
CACHE = Path(os.environ.get("ATTNKIT_CACHE", Path.home() / ".cache" / "attnkit"))
SOURCE = (CACHE / "src" / f"pytorch-fast-transformers-{FT_VERSION}" / "fast_transformers"
          / "causal_product" / "causal_product_cpu.cpp")
BUILD = CACHE / "build" / f"fast-transformers-{FT_VERSION}-torch-{torch.__version__}"
CFLAGS = ["-O2", "-fwrapv", "-DNDEBUG", "-fopenmp", "-ffast-math"]


def load(verbose=False):
    """The compiled module: causal_dot_product(Q, K, V, out) and
    causal_dot_backward(Q, K, V, grad_out, grad_Q, grad_K, grad_V), tensors [N, H, L, E]."""
    if not SOURCE.is_file():
        sys.exit(f"fast_transformers_kernel.py: {SOURCE} missing; run scripts/bench_venv.sh")
    from torch.utils import cpp_extension
    BUILD.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(name="ft_causal_product_cpu", sources=[str(SOURCE)],
                              extra_cflags=CFLAGS, build_directory=str(BUILD), verbose=verbose)


class CausalDotProduct(torch.autograd.Function):
    """The kernel as an autograd function, called the way fast-transformers' own wrapper calls it
    (zero-filled output and gradients, the kernel writes into them)."""
    module = None

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        out = torch.zeros(q.shape[:3] + v.shape[3:], dtype=q.dtype)
        CausalDotProduct.module.causal_dot_product(q, k, v, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        grads = [torch.zeros_like(x) for x in (q, k, v)]
        CausalDotProduct.module.causal_dot_backward(q, k, v, grad_out.contiguous(), *grads)
        return tuple(grads)


def causal_product(q, k, v):
    """Σ_{j<=i} (q_i·k_j) v_j for [N, L, H, E] inputs, as fast-transformers' causal_linear does it:
    permute to [N, H, L, E], make contiguous, run the kernel, permute back."""
    if CausalDotProduct.module is None:
        CausalDotProduct.module = load()
    q, k, v = (x.permute(0, 2, 1, 3).contiguous() for x in (q, k, v))
    return CausalDotProduct.apply(q, k, v).permute(0, 2, 1, 3).contiguous()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", action="store_true", help="build (or find) the kernel")
    a = p.parse_args()
    if a.build:
        module = load()
        print(f"fast_transformers_kernel.py: {module.__file__}", file=sys.stderr)


if __name__ == "__main__":
    main()
