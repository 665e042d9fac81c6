"""Loads attnkit's C++ operators (torch.ops.attnkit.*) and registers what the C++ side leaves to
Python: the fake (meta) kernels that let torch.compile trace the ops without running them, and
the autograd formulas, whose backward passes call the ops' C++ backward kernels (themselves
torch.library ops). See src/torch_ops/package_ops.cpp for the ops' schemas."""
from __future__ import annotations

import importlib.machinery
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _library_path() -> str:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, "_kernels" + suffix)
        if os.path.exists(path):
            return path
    raise ImportError(
        f"attnkit: the compiled operators (_kernels*.so) are missing from {_HERE}; install the package "
        "with `pip install --no-build-isolation .` from attnkit's source tree")


torch.ops.load_library(_library_path())
ops = torch.ops.attnkit

# ---- fake kernels: output shapes, dtypes and strides of the real kernels ----------------------


def _empty_attention_layout(like, d):
    """The layout of the flash kernel's outputs (src/ops/flash_attention.cpp,
    empty_attention_layout): out like q, dq/dk/dv like q/k/v. [B, H, n, d] in position-major
    storage [B, n, H, d] when `like` is laid out that way (more than one head and position, head
    stride below position stride: Hugging Face's transposed projections), so that
    out.transpose(1, 2) is contiguous; contiguous [B, H, n, d] otherwise."""
    B, H, n, _ = like.shape
    if H > 1 and n > 1 and like.stride(1) < like.stride(2):
        return like.new_empty((B, n, H, d)).transpose(1, 2)
    return like.new_empty((B, H, n, d))


@torch.library.register_fake("attnkit::flash_attention")
def _flash_attention_fake(q, k, v, mask=None, causal=False, scale=1.0, dropout=0.0, seed=0):
    B, H, L, _ = q.shape
    return _empty_attention_layout(q, v.shape[3]), q.new_empty((B, H, L))


@torch.library.register_fake("attnkit::flash_attention_backward")
def _flash_attention_backward_fake(grad_out, q, k, v, out, lse, mask, causal, scale, dropout,
                                   seed):
    return (_empty_attention_layout(q, q.shape[3]), _empty_attention_layout(k, k.shape[3]),
            _empty_attention_layout(v, v.shape[3]))


# The other ops' real kernels return contiguous tensors.


@torch.library.register_fake("attnkit::feature_attention")
def _feature_attention_fake(q, k, v, feature, causal=False, key_padding_mask=None,
                            prefix_lengths=None):
    B, H, L, _ = q.shape
    return v.new_empty((B, H, L, v.shape[3])), v.new_empty((B, H, L))


@torch.library.register_fake("attnkit::feature_attention_backward")
def _feature_attention_backward_fake(grad_out, q, k, v, out, den, feature, causal,
                                     key_padding_mask, prefix_lengths):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@torch.library.register_fake("attnkit::causal_product")
def _causal_product_fake(q, k, v, reverse=False):
    B, H, n, _ = q.shape
    return v.new_empty((B, H, n, v.shape[3]))


# ---- autograd ------------------------------------------------------------------------------------


def _flash_setup(ctx, inputs, output):
    q, k, v, mask, causal, scale, dropout, seed = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask)
    ctx.settings = (causal, scale, dropout, seed)
    ctx.mark_non_differentiable(lse)


def _flash_backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse, mask = ctx.saved_tensors
    # grad_out in any layout (typically position-major, like out): the kernel reads its strides.
    dq, dk, dv = ops.flash_attention_backward(grad_out, q, k, v, out, lse, mask, *ctx.settings)
    return dq, dk, dv, None, None, None, None, None


torch.library.register_autograd("attnkit::flash_attention", _flash_backward,
                                setup_context=_flash_setup)


def _feature_setup(ctx, inputs, output):
    q, k, v, feature, causal, key_padding_mask, prefix_lengths = inputs
    out, den = output
    ctx.save_for_backward(q, k, v, out, den, key_padding_mask, prefix_lengths)
    ctx.settings = (feature, causal)
    ctx.mark_non_differentiable(den)


def _feature_backward(ctx, grad_out, _grad_den):
    q, k, v, out, den, key_padding_mask, prefix_lengths = ctx.saved_tensors
    feature, causal = ctx.settings
    dq, dk, dv = ops.feature_attention_backward(grad_out.contiguous(), q, k, v, out, den, feature,
                                                causal, key_padding_mask, prefix_lengths)
    return dq, dk, dv, None, None, None, None


torch.library.register_autograd("attnkit::feature_attention", _feature_backward,
                                setup_context=_feature_setup)


def _causal_product_setup(ctx, inputs, output):
    q, k, v, reverse = inputs
    ctx.save_for_backward(q, k, v)
    ctx.reverse = reverse


def _causal_product_backward(ctx, grad):
    # Y_t = sum_{s <= t} (q_t . k_s) v_s:  dq = CP(g, v, k), dk = CP_rev(v, g, q), dv = CP_rev(k, q, g)
    # (CP_rev sums over s >= t). The backward is the op itself, so it is differentiable again.
    q, k, v = ctx.saved_tensors
    rev = ctx.reverse
    g = grad.contiguous()
    dq = ops.causal_product(g, v, k, rev) if ctx.needs_input_grad[0] else None
    dk = ops.causal_product(v, g, q, not rev) if ctx.needs_input_grad[1] else None
    dv = ops.causal_product(k, q, g, not rev) if ctx.needs_input_grad[2] else None
    return dq, dk, dv, None


torch.library.register_autograd("attnkit::causal_product", _causal_product_backward,
                                setup_context=_causal_product_setup)


def _no_double_backward(name):
    def backward(ctx, *grads):
        raise RuntimeError(f"attnkit::{name}: double backward (create_graph through attnkit's "
                           "fused backward kernel) is not supported")

    def setup(ctx, inputs, output):
        pass

    torch.library.register_autograd(f"attnkit::{name}", backward, setup_context=setup)


# The fused backward kernels have no derivative of their own: differentiating through them
# (a create_graph backward, then another backward) fails with a one-line error instead of
# silently treating them as constants.
_no_double_backward("flash_attention_backward")
_no_double_backward("feature_attention_backward")
