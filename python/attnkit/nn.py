"""Drop-in attention modules on attnkit's kernels (CPU)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from . import functional as F

Tensor = torch.Tensor

KINDS = ("softmax", "linear:elu", "linear:relu", "linear:favor", "cosformer")


def _parse_kind(kind: str):
    """'softmax', 'linear:elu', 'linear:relu', 'linear:favor[:M[:SEED]]' or 'cosformer'."""
    if kind in ("softmax", "cosformer", "linear:elu", "linear:relu"):
        return kind, 0, 0
    if kind.startswith("linear:favor"):
        parts = kind.split(":")[2:]
        try:
            m = int(parts[0]) if parts else 0
            seed = int(parts[1]) if len(parts) > 1 else 0
            if len(parts) <= 2 and m >= 0:
                return "linear:favor", m, seed
        except ValueError:
            pass
    raise ValueError(f"attnkit.nn: unknown attention kind {kind!r}; use one of {', '.join(KINDS)} "
                     "(linear:favor:M or linear:favor:M:SEED choose favor's features)")


class Attention(nn.Module):
    """Attention over per-head tensors [B, H, L, d] (no projections): the function of ``kind``.

    Args:
        kind: "softmax", "linear:elu", "linear:relu", "linear:favor[:M[:SEED]]", "cosformer".
        head_dim: the key size d (needed by linear:favor to draw its projection, kept as a buffer
            so that it is saved and loaded with the state dict).
        causal: the default causal flag of forward().
        dropout: softmax kind only: dropout on the attention probabilities while training.
    """

    def __init__(self, kind: str = "softmax", head_dim: Optional[int] = None, causal: bool = False,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.kind, m, seed = _parse_kind(kind)
        self.causal = causal
        self.dropout = dropout
        if dropout and self.kind != "softmax":
            raise ValueError(f"attnkit.nn: dropout applies to the softmax kind only, not {kind!r}")
        if self.kind == "linear:favor":
            if head_dim is None:
                raise ValueError("attnkit.nn: linear:favor needs head_dim to draw its projection")
            self.register_buffer("projection", F.favor_projection(head_dim, m, seed))
        else:
            self.projection = None

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, causal: Optional[bool] = None,
                attn_mask: Optional[Tensor] = None, key_padding_mask: Optional[Tensor] = None,
                prefix_lengths: Optional[Tensor] = None, seed: Optional[int] = None) -> Tensor:
        """q [B, H, L, d], k [B, H, S, d], v [B, H, S, dv] -> [B, H, L, dv]. attn_mask (softmax
        only): bool (True = attend) or additive; key_padding_mask [B, S] bool, True = real key;
        prefix_lengths [B]: prefix-LM / UniLM."""
        causal = self.causal if causal is None else causal
        if self.kind == "softmax":
            return F.softmax_attention(q, k, v, attn_mask, causal=causal,
                                       dropout=self.dropout if self.training else 0.0, seed=seed,
                                       key_padding_mask=key_padding_mask,
                                       prefix_lengths=prefix_lengths)
        if attn_mask is not None:
            raise ValueError(f"attnkit.nn: the {self.kind} kind takes causal, key_padding_mask and "
                             "prefix_lengths, not an arbitrary attn_mask")
        if self.kind == "cosformer":
            return F.cosformer_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask,
                                         prefix_lengths=prefix_lengths)
        return F.linear_attention(q, k, v, self.kind.split(":")[1], causal=causal,
                                  key_padding_mask=key_padding_mask,
                                  prefix_lengths=prefix_lengths, projection=self.projection)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, causal={self.causal}, dropout={self.dropout}"


class MultiheadAttention(nn.Module):
    """Multi-head attention like torch.nn.MultiheadAttention (batch_first=True), with the
    attention function chosen by ``kind``.

    Args:
        embed_dim, num_heads: as torch.nn.MultiheadAttention (embed_dim divisible by num_heads).
        kind: "softmax", "linear:elu", "linear:relu", "linear:favor[:M[:SEED]]", "cosformer".
        dropout: softmax only, on the attention probabilities while training.
        bias: biases in the four projections.
        causal: the default causal flag (forward(..., is_causal=) overrides it).
        kdim, vdim: key and value input sizes (default embed_dim).

    forward(query [B, L, E], key [B, S, kdim], value [B, S, vdim]) returns (output [B, L, E], None):
    attention weights are never formed, so need_weights is not supported.
    """

    def __init__(self, embed_dim: int, num_heads: int, kind: str = "softmax", dropout: float = 0.0,
                 bias: bool = True, causal: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None) -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"attnkit.nn.MultiheadAttention: embed_dim {embed_dim} is not "
                             f"divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(kdim or embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(vdim or embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.attention = Attention(kind, self.head_dim, causal, dropout)

    @property
    def kind(self) -> str:
        return self.attention.kind

    def _heads(self, x: Tensor) -> Tensor:
        B, n, _ = x.shape
        return x.view(B, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, need_weights: bool = False,
                attn_mask: Optional[Tensor] = None, is_causal: Optional[bool] = None,
                prefix_lengths: Optional[Tensor] = None):
        """key_padding_mask [B, S] bool with True = real key (attnkit's convention; note that
        torch.nn.MultiheadAttention's True means *padding*). attn_mask: softmax kind only, bool
        with True = attend, or additive float."""
        if need_weights:
            raise ValueError("attnkit.nn.MultiheadAttention: attention weights are never formed; "
                             "call it with need_weights=False")
        key = query if key is None else key
        value = key if value is None else value
        q = self._heads(self.q_proj(query))
        k = self._heads(self.k_proj(key))
        v = self._heads(self.v_proj(value))
        out = self.attention(q, k, v, causal=is_causal, attn_mask=attn_mask,
                             key_padding_mask=key_padding_mask, prefix_lengths=prefix_lengths)
        B, _, L, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, L, self.embed_dim)), None


class CosformerAttention(MultiheadAttention):
    """MultiheadAttention with kind="cosformer"."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs) -> None:
        super().__init__(embed_dim, num_heads, kind="cosformer", **kwargs)


class LinearAttention(MultiheadAttention):
    """MultiheadAttention with kind="linear:<feature_map>" (elu, relu, favor[:M[:SEED]])."""

    def __init__(self, embed_dim: int, num_heads: int, feature_map: str = "elu", **kwargs) -> None:
        super().__init__(embed_dim, num_heads, kind="linear:" + feature_map, **kwargs)
