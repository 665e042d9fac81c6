"""attnkit as a Hugging Face transformers attention backend.

    import attnkit.transformers
    attnkit.transformers.register()
    model = AutoModel.from_pretrained(name, attn_implementation="attnkit")

register() adds "attnkit" to transformers' AttentionInterface (the attention function: attnkit's
fused flash kernel, forward and backward) and to AttentionMaskInterface (the mask function:
transformers' own "sdpa" one, a bool mask with True = attend, or None where the causal flag alone
says it), so causal and padding masks reach the kernel exactly as they reach SDPA. Needs a
transformers with both interfaces (4.53 or later). Grouped-query attention (Llama-family models
with fewer key/value heads) repeats the key/value heads before the kernel.

No copies around the kernel: transformers hands over query/key/value as [B, H, L, d] views of its
projections' [B, L, H, d] storage, which the kernel reads through their strides, and the kernel
writes its output [B, H, L, dv] into [B, L, H, dv] storage for such inputs, so the transpose back
to transformers' [B, L, H, dv] is contiguous already (as with SDPA's CPU flash kernel); in the
backward pass likewise for the gradients.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .functional import softmax_attention

NAME = "attnkit"


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    if n_rep == 1:
        return x
    B, H, S, d = x.shape
    return x[:, :, None].expand(B, H, n_rep, S, d).reshape(B, H * n_rep, S, d)


def attnkit_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                              value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                              dropout: float = 0.0, scaling: Optional[float] = None,
                              is_causal: Optional[bool] = None, **kwargs
                              ) -> Tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, H, L, d], key/value [B, Hkv, S, d],
    attention_mask from the "sdpa" mask function (bool, True = attend; or additive float; or
    None) -> (output [B, L, H, dv], None). Follows transformers' SDPA backend in when the causal
    flag applies (no mask, more than one query, the module causal)."""
    if kwargs.get("softcap") is not None:
        raise ValueError("attnkit attention does not support softcap")
    if kwargs.get("position_bias") is not None:
        raise ValueError("attnkit attention does not support position_bias (T5-style biases)")
    n_rep = getattr(module, "num_key_value_groups", 1)
    key, value = _repeat_kv(key, n_rep), _repeat_kv(value, n_rep)
    q_length, kv_length = query.shape[2], key.shape[2]
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
    if is_causal and kv_length > q_length:
        # As transformers' SDPA backend (prefill into an empty static cache): its causal flag is
        # top-left aligned, attnkit's bottom-right; the keys past the queries are empty slots.
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    out = softmax_attention(query, key, value, attention_mask, causal=is_causal, scale=scaling,
                            dropout=dropout)
    # Contiguous already for transformers' position-major inputs (then .contiguous() is free).
    return out.transpose(1, 2).contiguous(), None


def register(name: str = NAME) -> None:
    """Registers attnkit's attention (and transformers' SDPA mask function) under ``name``, so that
    from_pretrained(..., attn_implementation=name) and model.set_attn_implementation(name) use it."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as error:  # pragma: no cover - depends on the installed transformers
        raise ImportError("attnkit.transformers.register() needs transformers >= 4.53 (with "
                          "AttentionInterface and masking_utils.AttentionMaskInterface)") from error
    AttentionInterface.register(name, attnkit_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
