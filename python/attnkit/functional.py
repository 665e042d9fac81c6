"""attnkit's attention functions on [batch, heads, length, dim] tensors (CPU).

Each function checks its arguments, builds the masks, and calls the fused C++ operators
(torch.ops.attnkit.*; float32 and float64 run in the kernels, other floating dtypes are computed
in float32 and cast back). All are differentiable and traceable by torch.compile(fullgraph=True).

Layout: q [B, H, L, dk], k [B, H, S, dk], v [B, H, S, dv] -> [B, H, L, dv].
Masks: ``key_padding_mask`` [B, S] bool (True = real key); ``prefix_lengths`` [B] integers, the
prefix-LM / UniLM mask (query i sees keys j < p_b, and keys p_b..i when i >= p_b; self attention,
L = S); ``causal``: query i sees key j iff j <= i + (S - L) (bottom-right aligned; the same as the
usual lower triangle when L = S).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from ._ops import ops

Tensor = torch.Tensor
_EPS = 1e-6
_KERNEL_DTYPES = (torch.float32, torch.float64)


def _check(name: str, q: Tensor, k: Tensor, v: Tensor, *extra: Optional[Tensor]) -> None:
    for t in (q, k, v) + extra:
        if t is not None and t.device.type != "cpu":
            raise RuntimeError(f"attnkit.{name}: attnkit runs on the CPU only, got a tensor on "
                               f"{t.device}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attnkit.{name}: q, k and v must be [batch, heads, length, dim], got "
                         f"shapes {tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}")
    if not (q.is_floating_point() and q.dtype == k.dtype == v.dtype):
        raise ValueError(f"attnkit.{name}: q, k and v must share one floating dtype, got "
                         f"{q.dtype}, {k.dtype} and {v.dtype}")


def _kernel_dtype(x: Tensor) -> torch.dtype:
    return x.dtype if x.dtype in _KERNEL_DTYPES else torch.float32


def prefix_lm_mask(prefix_lengths: Tensor, n: int) -> Tensor:
    """The prefix-LM mask [B, 1, n, n] (bool, True = may attend) of ``prefix_lengths`` [B]: query i
    sees key j iff j < p_b or j <= i. UniLM's seq2seq mask is this with p_b the source length."""
    i = torch.arange(n, device=prefix_lengths.device)
    p = prefix_lengths.to(torch.long).view(-1, 1, 1, 1)
    return (i.view(1, 1, 1, n) < p) | (i.view(1, 1, 1, n) <= i.view(1, 1, n, 1))


def unilm_prefix_lengths(segment_ids: Tensor) -> Tensor:
    """UniLM's seq2seq mask as prefix lengths: segment ids [B, n] of the form 0…0 1…1 (source,
    then target and its padding) -> the number of source tokens per row ([B], int64), for
    ``prefix_lengths=`` (with the padding as ``key_padding_mask``). Raises ValueError for a row
    with a 0 after a 1 or a value other than 0 and 1."""
    seg = segment_ids.to(torch.long)
    if seg.dim() != 2 or not bool(((seg == 0) | (seg == 1)).all()) or \
            bool((seg[:, 1:] < seg[:, :-1]).any()):
        raise ValueError("attnkit.unilm_prefix_lengths: segment ids must be [batch, n] rows of "
                         "0s (source) followed by 1s (target)")
    return (seg == 0).sum(1)


def causal_mask(L: int, S: int, device: Optional[torch.device] = None) -> Tensor:
    """[1, 1, L, S] bool: query i sees key j iff j <= i + (S - L)."""
    i = torch.arange(L, device=device).view(1, 1, L, 1)
    j = torch.arange(S, device=device).view(1, 1, 1, S)
    return j <= i + (S - L)


# ---- softmax attention ---------------------------------------------------------------------------


def softmax_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None, *,
                      causal: bool = False, scale: Optional[float] = None, dropout: float = 0.0,
                      seed: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
                      prefix_lengths: Optional[Tensor] = None) -> Tensor:
    """softmax(q kᵀ · scale + mask) v in attnkit's fused flash kernel (forward and backward).

    Args:
        mask: bool (True = attend) or additive float, broadcastable to [B, H, L, S].
        causal: bottom-right aligned causal mask (see the module docstring).
        scale: defaults to 1 / sqrt(dk).
        dropout: rate on the attention probabilities, in [0, 1). Kept weights are scaled by
            1 / (1 - dropout); the keep decision is a hash of (seed, position), the same in the
            backward pass.
        seed: dropout's seed; None draws one from torch's default generator (pass one explicitly
            under torch.compile(fullgraph=True)).
        key_padding_mask: [B, S] bool, True = real key.
        prefix_lengths: [B] integers: the prefix-LM / UniLM mask (L = S).

    A query whose keys are all masked gets a zero output (never NaN). A learned additive mask
    (requires_grad) is not supported by the kernel: it runs the ATen formula instead.
    """
    _check("softmax_attention", q, k, v, mask, key_padding_mask, prefix_lengths)
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"attnkit.softmax_attention: dropout must be in [0, 1), got {dropout}")
    B, H, L, dk = q.shape
    S = k.shape[2]
    allowed: Optional[Tensor] = None
    if key_padding_mask is not None:
        allowed = key_padding_mask.to(torch.bool).view(B, 1, 1, S)
    if prefix_lengths is not None:
        if L != S:
            raise ValueError("attnkit.softmax_attention: prefix_lengths is self attention (L = S), "
                             f"got L = {L} and S = {S}")
        pm = prefix_lm_mask(prefix_lengths, L)
        allowed = pm if allowed is None else allowed & pm
    if allowed is not None:
        if mask is None:
            mask = allowed
        elif mask.dtype == torch.bool:
            mask = mask & allowed
        else:
            mask = mask.masked_fill(~allowed, float("-inf"))
    s = 1.0 / math.sqrt(dk) if scale is None else float(scale)
    if dropout > 0.0 and seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    seed = 0 if seed is None else int(seed)
    if mask is not None and mask.dtype != torch.bool and mask.requires_grad:
        return _softmax_reference(q, k, v, mask, causal, s, dropout, seed)
    dtype = _kernel_dtype(q)
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(dtype)
    out, _ = ops.flash_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask, causal, s, dropout,
                                 seed)
    return out.to(q.dtype)


def _softmax_reference(q, k, v, mask, causal, scale, dropout, seed):
    logits = q @ k.transpose(-2, -1) * scale + mask
    if causal:
        logits = logits.masked_fill(~causal_mask(q.shape[2], k.shape[2]), float("-inf"))
    row_max = logits.detach().amax(-1, keepdim=True)
    row_max = row_max.masked_fill(torch.isneginf(row_max), 0.0)
    p = (logits - row_max).exp()
    total = p.sum(-1, keepdim=True)
    w = p / total.masked_fill(total == 0, 1.0)
    if dropout > 0.0:
        raise ValueError("attnkit.softmax_attention: dropout with a learned (requires_grad) "
                         "additive mask is not supported")
    return w @ v


# ---- linear attention and cosFormer --------------------------------------------------------------


def _parse_feature_map(spec: str) -> Tuple[str, int, int]:
    parts = spec.split(":")
    name = parts[0]
    if name in ("elu", "relu") and len(parts) == 1:
        return name, 0, 0
    if name == "favor" and len(parts) <= 3:
        try:
            m = int(parts[1]) if len(parts) > 1 else 0
            seed = int(parts[2]) if len(parts) > 2 else 0
        except ValueError:
            m = -1
        if m >= 0:
            return name, m, seed
    raise ValueError(f"attnkit: unknown feature map {spec!r}; use elu, relu, favor, favor:M or "
                     "favor:M:SEED")


def favor_projection(dim: int, num_features: int = 0, seed: int = 0) -> Tensor:
    """Performer's random projection W [m, dim] (float64), orthogonal rows with chi-distributed
    norms, drawn from ``seed``; num_features = 0 picks m = dim·ceil(ln dim) (at least dim). The
    same draw as the C++ toolkit's FeatureMap::favor."""
    return ops.favor_projection(dim, num_features, seed)


def favor_features(x: Tensor, projection: Tensor) -> Tensor:
    """FAVOR+ features exp(W x̃ − |x̃|²/2) / sqrt(m) with x̃ = x · d^(-1/4), so that
    φ(q)·φ(k) ≈ exp(q·k / sqrt(d))."""
    d = projection.shape[1]
    if x.shape[-1] != d:
        raise ValueError(f"attnkit: the favor projection was drawn for dimension {d} but the input "
                         f"has shape {tuple(x.shape)}")
    xs = x * d ** -0.25
    proj = xs @ projection.to(x.dtype).transpose(0, 1)
    return (proj - xs.pow(2).sum(-1, keepdim=True) * 0.5).exp() / math.sqrt(projection.shape[0])


def _feature(x: Tensor, name: str) -> Tensor:
    return torch.nn.functional.elu(x) + 1 if name == "elu" else torch.relu(x)


def cosformer_angles(count: int, first_offset: int, horizon: int, dtype: torch.dtype) -> Tensor:
    """π/2 · position / M for positions first_offset+1 .. first_offset+count ([count])."""
    pos = torch.arange(1 + first_offset, 1 + first_offset + count, dtype=torch.float64)
    return (pos * (math.pi / 2.0 / horizon)).to(dtype)


def cosformer_features(x: Tensor, angles: Tensor) -> Tensor:
    """[ReLU(x)·cos(angle), ReLU(x)·sin(angle)] along the last axis; angles [n] for x [B, H, n, d]."""
    r = torch.relu(x)
    a = angles.view(1, 1, -1, 1)
    return torch.cat([r * a.cos(), r * a.sin()], -1)


def _unfused(phi_q: Tensor, phi_k: Tensor, v: Tensor, causal: bool, clamp: bool) -> Tensor:
    """Feature attention on explicit features (padded keys already zeroed): causal sums through
    the causal_product op, bottom-right aligned."""
    L, S = phi_q.shape[2], phi_k.shape[2]
    if causal:
        dv = v.shape[3]
        v1 = torch.cat([v, torch.ones_like(v[..., :1])], 3)
        aligned = ops.causal_product(phi_q.contiguous(), phi_k[:, :, S - L:].contiguous(),
                                     v1[:, :, S - L:].contiguous(), False)
        if S > L:
            aligned = aligned + phi_q @ (phi_k[:, :, :S - L].transpose(-2, -1) @ v1[:, :, :S - L])
        num, den = aligned[..., :dv], aligned[..., dv:]
    else:
        num = phi_q @ (phi_k.transpose(-2, -1) @ v)
        den = phi_q @ phi_k.sum(2).unsqueeze(-1)
    den = den.clamp_min(_EPS) if clamp else den + _EPS
    return num / den


def _masked(phi_q: Tensor, phi_k: Tensor, v: Tensor, allowed: Tensor, clamp: bool) -> Tensor:
    scores = (phi_q @ phi_k.transpose(-2, -1)) * allowed.to(phi_q.dtype)
    den = scores.sum(-1, keepdim=True)
    den = den.clamp_min(_EPS) if clamp else den + _EPS
    return (scores @ v) / den


def _zero_padded(phi_k: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
    if key_padding_mask is None:
        return phi_k
    keep = key_padding_mask.to(phi_k.dtype)
    return phi_k * keep.view(keep.shape[0], 1, keep.shape[1], 1)


def _check_feature_args(name, q, k, causal, key_padding_mask, prefix_lengths):
    L, S = q.shape[2], k.shape[2]
    if causal and L > S:
        raise ValueError(f"attnkit.{name}: causal attention needs L <= S, got L = {L}, S = {S}")
    if prefix_lengths is not None and (causal or L != S):
        raise ValueError(f"attnkit.{name}: prefix_lengths is self attention (L = S) and excludes "
                         f"causal (prefix length 0 is causal); got L = {L}, S = {S}, "
                         f"causal = {causal}")
    if key_padding_mask is not None and key_padding_mask.dtype != torch.bool:
        raise ValueError(f"attnkit.{name}: key_padding_mask must be bool (True = real key), got "
                         f"{key_padding_mask.dtype}")


def linear_attention(q: Tensor, k: Tensor, v: Tensor, feature_map: str = "elu", *,
                     causal: bool = False, key_padding_mask: Optional[Tensor] = None,
                     prefix_lengths: Optional[Tensor] = None,
                     projection: Optional[Tensor] = None) -> Tensor:
    """Linear attention (Katharopoulos et al. 2020):
    out_i = φ(q_i)·Σ_j φ(k_j) v_jᵀ / (φ(q_i)·Σ_j φ(k_j) + 1e-6), the sums over the keys query i sees.

    Args:
        feature_map: "elu" (elu(x) + 1), "relu", or "favor", "favor:M", "favor:M:SEED"
            (Performer's positive random features; M = 0 picks d·ceil(ln d)).
        causal: prefix sums over keys (RNN form), L <= S.
        key_padding_mask: [B, S] bool, True = real key.
        prefix_lengths: [B] integers, the prefix-LM / UniLM mask in O(n) (L = S).
        projection: favor's W [M, dk] (from favor_projection); None draws it from the spec.

    elu and relu run the fused kernels (feature map inside, forward and backward) except causal
    with L < S or key padding, which (like favor) go through φ tensors and the causal_product op.
    """
    _check("linear_attention", q, k, v, key_padding_mask, prefix_lengths, projection)
    _check_feature_args("linear_attention", q, k, causal, key_padding_mask, prefix_lengths)
    name, m, fseed = _parse_feature_map(feature_map)
    dtype = _kernel_dtype(q)
    qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
    L, S = q.shape[2], k.shape[2]
    if name != "favor" and not (causal and (L != S or key_padding_mask is not None)):
        out, _ = ops.feature_attention(qd, kd, vd, name, causal, key_padding_mask, prefix_lengths)
        return out.to(q.dtype)
    if name == "favor":
        w = favor_projection(q.shape[3], m, fseed) if projection is None else projection
        phi_q, phi_k = favor_features(qd, w), favor_features(kd, w)
    else:
        phi_q, phi_k = _feature(qd, name), _feature(kd, name)
    phi_k = _zero_padded(phi_k, key_padding_mask)
    if prefix_lengths is not None:
        return _masked(phi_q, phi_k, vd, prefix_lm_mask(prefix_lengths, L), False).to(q.dtype)
    return _unfused(phi_q, phi_k, vd, causal, False).to(q.dtype)


def cosformer_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                        key_padding_mask: Optional[Tensor] = None,
                        prefix_lengths: Optional[Tensor] = None) -> Tensor:
    """cosFormer attention (Qin et al. 2022): weight(i, j) = ReLU(q_i)·ReLU(k_j)·cos(π/2·(i−j)/M),
    1-based positions, M = max(L, S); out = Σ_j w_ij v_j / max(Σ_j w_ij, 1e-6). No 1/sqrt(d)
    scaling. causal: bottom-right aligned (query i at position i+1+S−L), L <= S.
    key_padding_mask [B, S] bool (True = real key); prefix_lengths [B]: prefix-LM / UniLM (L = S).
    Runs the fused kernels except causal with L < S or key padding (cos/sin features and the
    causal_product op)."""
    _check("cosformer_attention", q, k, v, key_padding_mask, prefix_lengths)
    _check_feature_args("cosformer_attention", q, k, causal, key_padding_mask, prefix_lengths)
    dtype = _kernel_dtype(q)
    qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
    L, S = q.shape[2], k.shape[2]
    if not (causal and (L != S or key_padding_mask is not None)):
        out, _ = ops.feature_attention(qd, kd, vd, "cosformer", causal, key_padding_mask,
                                       prefix_lengths)
        return out.to(q.dtype)
    M = max(L, S, 1)
    phi_q = cosformer_features(qd, cosformer_angles(L, S - L, M, dtype))
    phi_k = _zero_padded(cosformer_features(kd, cosformer_angles(S, 0, M, dtype)),
                         key_padding_mask)
    return _unfused(phi_q, phi_k, vd, True, True).to(q.dtype)


# ---- recurrent (decoding) form -------------------------------------------------------------------


@dataclass
class RecurrentState:
    """The running sums S = Σ_j φ(k_j) [v_j, 1]ᵀ ([B, H, m, dv + 1]) and the tokens consumed."""
    sums: Optional[Tensor] = None
    position: int = 0


def _step(state: RecurrentState, phi_q: Tensor, phi_k: Tensor, v: Tensor,
          clamp: bool) -> Tuple[Tensor, RecurrentState]:
    sums = state.sums
    if sums is None:
        B, H, _, m = phi_q.shape
        sums = phi_q.new_zeros((B, H, m, v.shape[3] + 1))
    out, sums = ops.recurrent_step(sums, phi_q, phi_k, v, clamp)
    return out, RecurrentState(sums, state.position + 1)


def linear_attention_step(state: RecurrentState, q: Tensor, k: Tensor, v: Tensor,
                          feature_map: str = "elu", projection: Optional[Tensor] = None
                          ) -> Tuple[Tensor, RecurrentState]:
    """One decoding step of causal linear attention: q, k, v [B, H, 1, d] -> (output [B, H, 1, dv],
    the new state). Stepping through a sequence gives linear_attention(..., causal=True)."""
    _check("linear_attention_step", q, k, v)
    name, m, fseed = _parse_feature_map(feature_map)
    if name == "favor":
        w = favor_projection(q.shape[3], m, fseed) if projection is None else projection
        return _step(state, favor_features(q, w), favor_features(k, w), v, False)
    return _step(state, _feature(q, name), _feature(k, name), v, False)


def cosformer_attention_step(state: RecurrentState, q: Tensor, k: Tensor, v: Tensor,
                             horizon: int) -> Tuple[Tensor, RecurrentState]:
    """One decoding step of causal cosFormer with the horizon M fixed in advance (M >= the final
    length; the parallel op uses M = max(L, S)): token t (1-based) gets angle π/2·t/M."""
    _check("cosformer_attention_step", q, k, v)
    if state.position + 1 > horizon:
        raise ValueError(f"attnkit.cosformer_attention_step: token {state.position + 1} is beyond "
                         f"the horizon M = {horizon}; choose M >= the final length")
    angle = cosformer_angles(1, state.position, horizon, q.dtype)
    return _step(state, cosformer_features(q, angle), cosformer_features(k, angle), v, True)
