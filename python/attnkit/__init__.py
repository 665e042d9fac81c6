"""attnkit: fused CPU attention kernels for PyTorch (docs/python.md).

    import attnkit
    out = attnkit.softmax_attention(q, k, v, causal=True)        # q, k, v [B, H, L, d]
    out = attnkit.linear_attention(q, k, v, "elu", causal=True)
    out = attnkit.cosformer_attention(q, k, v)

Modules: attnkit.nn (MultiheadAttention with kind="softmax" | "linear:elu" | "linear:relu" |
"linear:favor" | "cosformer"); Hugging Face backend: attnkit.transformers.register().
The operators themselves are torch.ops.attnkit.* (torch.library custom ops with fake kernels and
autograd, so torch.compile(fullgraph=True) traces them).
"""
from . import _ops
from .functional import (RecurrentState, cosformer_attention, cosformer_attention_step,
                         favor_projection, linear_attention, linear_attention_step,
                         prefix_lm_mask, softmax_attention, unilm_prefix_lengths)
from . import nn

__version__ = "0.1.0"
ops = _ops.ops

__all__ = ["softmax_attention", "linear_attention", "cosformer_attention", "favor_projection",
           "linear_attention_step", "cosformer_attention_step", "RecurrentState", "prefix_lm_mask", "unilm_prefix_lengths",
           "nn", "ops"]
