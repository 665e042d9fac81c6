"""torch.ops.attnkit.*: opcheck (schema, fake kernels, autograd registration, AOT dispatch),
gradcheck in float64, and equality with PyTorch's own formulas."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

import attnkit

ops = torch.ops.attnkit


def qkv(B=2, H=3, L=7, S=7, d=5, dv=4, dtype=torch.float64, grad=False, scale=1.0):
    q = (torch.randn(B, H, L, d, dtype=dtype) * scale).requires_grad_(grad)
    k = (torch.randn(B, H, S, d, dtype=dtype) * scale).requires_grad_(grad)
    v = torch.randn(B, H, S, dv, dtype=dtype).requires_grad_(grad)
    return q, k, v


# ---- pure-PyTorch references (written from the papers' formulas, independent of attnkit) --------

def allowed_mask(L, S, causal, key_padding_mask=None, prefix_lengths=None, B=1):
    i = torch.arange(L).view(L, 1)
    j = torch.arange(S).view(1, S)
    allowed = (j <= i + (S - L)) if causal else torch.ones(L, S, dtype=torch.bool)
    allowed = allowed.view(1, 1, L, S).expand(B, 1, L, S)
    if prefix_lengths is not None:
        p = prefix_lengths.view(-1, 1, 1, 1)
        allowed = allowed & ((j < p) | (j <= i))
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask.view(B, 1, 1, S)
    return allowed


def linear_reference(q, k, v, phi, allowed):
    scores = (phi(q) @ phi(k).transpose(-2, -1)) * allowed.to(q.dtype)
    return (scores @ v) / (scores.sum(-1, keepdim=True) + 1e-6)


def cosformer_reference(q, k, v, allowed, causal):
    L, S = q.shape[2], k.shape[2]
    M = max(L, S)
    qpos = torch.arange(1, L + 1, dtype=q.dtype) + ((S - L) if causal else 0)
    kpos = torch.arange(1, S + 1, dtype=q.dtype)
    cos = torch.cos(math.pi / 2 * (qpos.view(L, 1) - kpos.view(1, S)) / M)
    w = (torch.relu(q) @ torch.relu(k).transpose(-2, -1)) * cos * allowed.to(q.dtype)
    return (w @ v) / w.sum(-1, keepdim=True).clamp_min(1e-6)


ELU = lambda x: F.elu(x) + 1  # noqa: E731


# ---- opcheck ------------------------------------------------------------------------------------

def test_opcheck_flash_attention():
    q, k, v = qkv(grad=True)
    mask = torch.rand(2, 1, 7, 7) > 0.3
    for args in [(q, k, v, None, False, 0.4, 0.0, 0), (q, k, v, mask, True, 0.4, 0.2, 7)]:
        torch.library.opcheck(ops.flash_attention, args)


def test_opcheck_flash_attention_backward():
    q, k, v = qkv()
    out, lse = ops.flash_attention(q, k, v, None, True, 0.5, 0.0, 0)
    torch.library.opcheck(ops.flash_attention_backward,
                          (torch.randn_like(out), q, k, v, out, lse, None, True, 0.5, 0.0, 0))


def strided_qkv(layout, B=2, H=3, L=7, S=7, d=5, dtype=torch.float64, grad=False):
    """q, k, v as the non-contiguous views models hand over. "transposed": [B, H, n, d] views of
    [B, n, H, d] storage (Hugging Face's projections); "fused-slice": slots of one fused q|k|v
    projection [B, n, 3, H, d] (GPT-2's c_attn; not dense); "padded-rows": the first d features of
    wider rows; "strided-features": [B, n, d, H] storage (features not contiguous: the one layout
    the kernel copies, its outputs still laid out like the given views). The views are leaves when
    grad is set (gradcheck perturbs them in place)."""
    def one(n, i):
        if layout == "transposed":
            t = torch.randn(B, n, H, d, dtype=dtype).transpose(1, 2)
        elif layout == "fused-slice":
            t = torch.randn(B, n, 3, H, d, dtype=dtype)[:, :, i].transpose(1, 2)
        elif layout == "strided-features":
            t = torch.randn(B, n, d, H, dtype=dtype).permute(0, 3, 1, 2)
        else:
            t = torch.randn(B, H, n, d + 3, dtype=dtype)[..., :d]
        assert not t.is_contiguous()
        return t.requires_grad_(grad)
    return one(L, 0), one(S, 1), one(S, 2)


LAYOUTS = ["transposed", "fused-slice", "padded-rows", "strided-features"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_opcheck_flash_attention_strided(layout):
    """Strided operands: the kernels read them in place, and the outputs (out, dq, dk, dv) are
    position-major for position-major inputs; the fake kernels give the same strides."""
    q, k, v = strided_qkv(layout, grad=True)
    mask = torch.rand(2, 1, 7, 7) > 0.3
    for args in [(q, k, v, None, False, 0.4, 0.0, 0), (q, k, v, mask, True, 0.4, 0.2, 7)]:
        torch.library.opcheck(ops.flash_attention, args)
    q, k, v = (t.detach() for t in (q, k, v))
    out, lse = ops.flash_attention(q, k, v, None, True, 0.5, 0.0, 0)
    position_major = layout != "padded-rows"
    assert out.transpose(1, 2).is_contiguous() == position_major
    grad_out = torch.randn(2, 7, 3, 5, dtype=torch.float64).transpose(1, 2)
    args = (grad_out, q, k, v, out, lse, None, True, 0.5, 0.0, 0)
    torch.library.opcheck(ops.flash_attention_backward, args)
    grads = ops.flash_attention_backward(*args)
    for g in grads:
        assert g.transpose(1, 2).is_contiguous() == position_major
    # The fake kernels' strides are the real ones (torch.compile plans its buffers with them).
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in args[:6]]
        fake_out, fake_lse = ops.flash_attention(*fake[1:4], None, True, 0.5, 0.0, 0)
        fake_grads = ops.flash_attention_backward(*fake, None, True, 0.5, 0.0, 0)
    assert fake_out.stride() == out.stride() and fake_lse.stride() == lse.stride()
    assert [g.stride() for g in fake_grads] == [g.stride() for g in grads]


@pytest.mark.parametrize("feature", ["elu", "relu", "cosformer"])
def test_opcheck_feature_attention(feature):
    q, k, v = qkv(grad=True)
    kpm = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    prefix = torch.tensor([3, 0])
    for args in [(q, k, v, feature, False, None, None), (q, k, v, feature, True, None, None),
                 (q, k, v, feature, False, kpm, None), (q, k, v, feature, False, kpm, prefix)]:
        torch.library.opcheck(ops.feature_attention, args)
        out, den = ops.feature_attention(*[a.detach() if isinstance(a, torch.Tensor) else a
                                           for a in args])
        torch.library.opcheck(ops.feature_attention_backward,
                              (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out,
                               den) + args[3:])


def test_opcheck_causal_product_and_recurrent_step():
    q, k, v = qkv(grad=True)
    torch.library.opcheck(ops.causal_product, (q, k, v, False))
    torch.library.opcheck(ops.causal_product, (q, k, v, True))
    state = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    one = lambda t: t[:, :, :1].detach().clone().requires_grad_(True)  # noqa: E731
    torch.library.opcheck(ops.recurrent_step, (state, one(q).abs(), one(k).abs(), one(v), False))


def test_favor_projection_op():
    torch.library.opcheck(ops.favor_projection, (8, 12, 3))
    w = ops.favor_projection(8, 12, 3)
    assert w.shape == (12, 8) and w.dtype == torch.float64
    assert torch.equal(w, attnkit.favor_projection(8, 12, 3))
    assert not torch.equal(w, attnkit.favor_projection(8, 12, 4))
    # default M = d·ceil(ln d)
    assert attnkit.favor_projection(8).shape == (8 * math.ceil(math.log(8)), 8)


# ---- gradcheck in float64 -------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_softmax(causal):
    q, k, v = qkv(L=5, S=6, grad=True)
    kpm = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    fn = lambda q, k, v: attnkit.softmax_attention(q, k, v, causal=causal,  # noqa: E731
                                                    key_padding_mask=kpm)
    assert torch.autograd.gradcheck(fn, (q, k, v))
    fn = lambda q, k, v: attnkit.softmax_attention(q, k, v, dropout=0.3, seed=11)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_softmax_strided(layout):
    q, k, v = strided_qkv(layout, L=5, S=6, grad=True)
    mask = torch.rand(2, 1, 5, 6) > 0.3
    mask[..., 0] = True
    fn = lambda q, k, v: attnkit.softmax_attention(q, k, v, mask, dropout=0.3,  # noqa: E731
                                                    seed=5)
    assert torch.autograd.gradcheck(fn, (q, k, v))
    fn = lambda q, k, v: attnkit.softmax_attention(q, k, v, causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("feature", ["elu", "relu", "favor:16:1"])
@pytest.mark.parametrize("mode", ["plain", "causal", "causal-LS", "padding", "prefix"])
def test_gradcheck_linear(feature, mode):
    q, k, v = qkv(L=5 if mode == "causal-LS" else 6, S=6, grad=True, scale=0.5)
    kw = {"causal": mode.startswith("causal")}
    if mode == "padding":
        kw["key_padding_mask"] = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    if mode == "prefix":
        kw["prefix_lengths"] = torch.tensor([2, 6])
    fn = lambda q, k, v: attnkit.linear_attention(q, k, v, feature, **kw)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("mode", ["plain", "cross", "causal", "causal-LS", "causal-padding",
                                  "prefix"])
def test_gradcheck_cosformer(mode):
    L = {"cross": 4, "causal-LS": 5}.get(mode, 6)
    q, k, v = qkv(L=L, S=6, grad=True)
    kw = {"causal": mode.startswith("causal")}
    if mode in ("causal-padding",):
        kw["key_padding_mask"] = torch.tensor([[True] * 6, [True] * 5 + [False]])
    if mode == "prefix":
        kw["prefix_lengths"] = torch.tensor([3, 1])
    fn = lambda q, k, v: attnkit.cosformer_attention(q, k, v, **kw)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_double_backward_through_fused_kernels_is_refused():
    q, k, v = qkv(L=5, S=5, grad=True)
    for out in (attnkit.softmax_attention(q, k, v), attnkit.linear_attention(q, k, v, "elu")):
        (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
        with pytest.raises(RuntimeError, match="double backward .* is not supported"):
            gq.sum().backward()


def test_unilm_equals_its_explicit_mask():
    """UniLM: [source | target + padding] segment ids as prefix lengths plus key padding equal
    the explicit mask (a target token sees the source and the target so far)."""
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1]])
    real = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]]).bool()
    p = attnkit.unilm_prefix_lengths(seg)
    assert p.tolist() == [3, 5]
    c = seg.cumsum(1)
    explicit = (c.view(2, 1, 1, 8) <= c.view(2, 1, 8, 1)) & real.view(2, 1, 1, 8)
    q, k, v = qkv(B=2, H=2, L=8, S=8, d=4, dv=4)
    out = attnkit.softmax_attention(q, k, v, prefix_lengths=p, key_padding_mask=real)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=explicit))
    lin = attnkit.linear_attention(q, k, v, "relu", prefix_lengths=p, key_padding_mask=real)
    torch.testing.assert_close(lin, linear_reference(q, k, v, torch.relu, explicit))
    with pytest.raises(ValueError, match="0s \\(source\\) followed by 1s"):
        attnkit.unilm_prefix_lengths(torch.tensor([[0, 1, 0]]))


def test_gradcheck_causal_product_twice():
    q, k, v = qkv(L=5, S=5, grad=True)
    assert torch.autograd.gradgradcheck(lambda q, k, v: ops.causal_product(q, k, v, False),
                                        (q, k, v))


# ---- equality with PyTorch -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("case", ["plain", "causal", "bool-mask", "additive-mask", "padding",
                                  "prefix", "cross"])
def test_softmax_equals_sdpa(dtype, tol, case):
    L = 9 if case == "cross" else 33
    q, k, v = qkv(B=2, H=4, L=L, S=33, d=16, dv=16, dtype=dtype, grad=True)
    kw, sdpa = {}, {}
    if case == "causal":
        kw["causal"] = sdpa["is_causal"] = True
    elif case == "bool-mask":
        mask = torch.rand(2, 1, L, 33) > 0.3
        mask[..., 0] = True
        kw["mask"] = sdpa["attn_mask"] = mask
    elif case == "additive-mask":
        kw["mask"] = sdpa["attn_mask"] = torch.randn(1, 4, L, 33, dtype=dtype)
    elif case == "padding":
        kpm = torch.ones(2, 33, dtype=torch.bool)
        kpm[1, 20:] = False
        kw["key_padding_mask"] = kpm
        sdpa["attn_mask"] = kpm.view(2, 1, 1, 33)
    elif case == "prefix":
        p = torch.tensor([5, 0])
        kw["prefix_lengths"] = p
        sdpa["attn_mask"] = allowed_mask(33, 33, False, prefix_lengths=p, B=2) | \
            allowed_mask(33, 33, True, B=2)
    out = attnkit.softmax_attention(q, k, v, **kw)
    ref = F.scaled_dot_product_attention(q, k, v, **sdpa)
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=10 * tol, rtol=10 * tol)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_softmax_equals_contiguous_and_sdpa(layout):
    q, k, v = strided_qkv(layout, B=2, H=4, L=300, S=301, d=16, dtype=torch.float32, grad=True)
    contiguous = [t.detach().contiguous().requires_grad_() for t in (q, k, v)]
    out = attnkit.softmax_attention(q, k, v, causal=True)
    ref = attnkit.softmax_attention(*contiguous, causal=True)
    sdpa = F.scaled_dot_product_attention(*contiguous, is_causal=True)  # top-left: L < S
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                    torch.autograd.grad(ref, contiguous, g)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # Against SDPA too, where both align the mask the same way (L = S).
    out = attnkit.softmax_attention(q[:, :, :300], k[:, :, :300], v[:, :, :300], causal=True)
    sdpa = F.scaled_dot_product_attention(*(t[:, :, :300] for t in contiguous), is_causal=True)
    torch.testing.assert_close(out, sdpa, atol=1e-5, rtol=1e-5)


def test_transposed_views_are_not_copied():
    """Hugging Face's layout end to end (projection -> view -> transpose -> attention -> transpose
    back), forward and backward: no aten copy or clone runs (the kernels read and write the
    strided storage), and the output handed back is contiguous [B, L, H, d] without one."""
    import attnkit.transformers as hf
    B, L, H, d = 2, 40, 4, 8
    x = torch.randn(B, L, 3 * H * d, requires_grad=True)
    q, k, v = (t.view(B, L, H, d).transpose(1, 2) for t in x.split(H * d, dim=2))
    g = torch.randn(B, L, H, d)
    module = torch.nn.Module()
    module.is_causal = True
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, _ = hf.attnkit_attention_forward(module, q, k, v, None, scaling=0.3)
        grads = torch.autograd.grad(out, (q, k, v), g)
    names = {event.name for event in prof.events()}
    assert "attnkit::flash_attention" in names and "attnkit::flash_attention_backward" in names
    copies = names & {"aten::copy_", "aten::clone", "aten::contiguous"}
    assert not copies, f"copies around the kernel: {sorted(copies)}"
    assert out.shape == (B, L, H, d) and out.is_contiguous()
    for grad in grads:  # position-major, like the projections: their transpose is contiguous
        assert grad.transpose(1, 2).is_contiguous()
    ref = F.scaled_dot_product_attention(*(t.detach() for t in (q, k, v)), is_causal=True,
                                         scale=0.3)
    torch.testing.assert_close(out, ref.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_softmax_dropout_is_seeded_and_unbiased():
    """Dropout's keep decisions are fixed by the seed (the same seed gives the same output, another
    seed another one), and averaged over seeds the output is attention without dropout."""
    q, k, v = qkv(B=1, H=2, L=16, S=16, d=8, dv=8)
    a = attnkit.softmax_attention(q, k, v, dropout=0.25, seed=5)
    b = attnkit.softmax_attention(q, k, v, dropout=0.25, seed=5)
    c = attnkit.softmax_attention(q, k, v, dropout=0.25, seed=6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    exact = F.scaled_dot_product_attention(q, k, v)
    assert (a - exact).abs().max() > 0.05
    mean = sum(attnkit.softmax_attention(q, k, v, dropout=0.25, seed=s) for s in range(400)) / 400
    torch.testing.assert_close(mean, exact, atol=0.08, rtol=0)


@pytest.mark.parametrize("feature,phi", [("elu", ELU), ("relu", torch.relu)])
@pytest.mark.parametrize("mode", ["plain", "cross", "causal", "causal-LS", "padding",
                                  "causal-padding", "prefix"])
def test_linear_equals_formula(feature, phi, mode):
    L = {"cross": 11, "causal-LS": 20}.get(mode, 29)
    B, S = 2, 29
    q, k, v = qkv(B=B, H=2, L=L, S=S, d=8, dv=6)
    kpm = prefix = None
    if "padding" in mode:
        kpm = torch.ones(B, S, dtype=torch.bool)
        kpm[0, 17:] = False
    if mode == "prefix":
        prefix = torch.tensor([9, 29])
    causal = mode.startswith("causal")
    out = attnkit.linear_attention(q, k, v, feature, causal=causal, key_padding_mask=kpm,
                                   prefix_lengths=prefix)
    ref = linear_reference(q, k, v, phi, allowed_mask(L, S, causal, kpm, prefix, B))
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


def test_favor_equals_formula_and_approximates_softmax():
    q, k, v = qkv(B=1, H=2, L=24, S=24, d=8, dv=8)
    w = attnkit.favor_projection(8, 256, 0)

    def phi(x):
        xs = x * 8 ** -0.25
        return torch.exp(xs @ w.T - (xs * xs).sum(-1, keepdim=True) / 2) / math.sqrt(256)

    for causal in (False, True):
        out = attnkit.linear_attention(q, k, v, "favor:256:0", causal=causal)
        ref = linear_reference(q, k, v, phi, allowed_mask(24, 24, causal))
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
        # An approximation of softmax attention: clearly closer to it than uniform weights are
        # (measured: 0.63 and 0.52 of the uniform error).
        exact = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        uniform = linear_reference(q, k, v, torch.ones_like, allowed_mask(24, 24, causal))
        assert (out - exact).abs().mean() < 0.75 * (uniform - exact).abs().mean()


@pytest.mark.parametrize("mode", ["plain", "cross", "causal", "causal-LS", "padding",
                                  "causal-padding", "prefix"])
def test_cosformer_equals_formula(mode):
    L = {"cross": 11, "causal-LS": 20}.get(mode, 29)
    B, S = 2, 29
    q, k, v = qkv(B=B, H=2, L=L, S=S, d=8, dv=6)
    kpm = prefix = None
    if "padding" in mode:
        kpm = torch.ones(B, S, dtype=torch.bool)
        kpm[1, 13:] = False
    if mode == "prefix":
        prefix = torch.tensor([0, 12])
    causal = mode.startswith("causal")
    out = attnkit.cosformer_attention(q, k, v, causal=causal, key_padding_mask=kpm,
                                      prefix_lengths=prefix)
    ref = cosformer_reference(q, k, v, allowed_mask(L, S, causal, kpm, prefix, B), causal)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_other_dtypes_keep_their_dtype(dtype):
    q, k, v = qkv(B=1, H=2, L=12, S=12, d=8, dv=8, dtype=dtype)
    for out in (attnkit.softmax_attention(q, k, v, causal=True),
                attnkit.linear_attention(q, k, v, "elu", causal=True),
                attnkit.cosformer_attention(q, k, v)):
        assert out.dtype == dtype and torch.isfinite(out.float()).all()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(attnkit.softmax_attention(q, k, v, causal=True).float(), ref,
                               atol=tol, rtol=tol)


# ---- recurrent decoding -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["elu", "relu", "favor:32:2", "cosformer"])
def test_recurrent_steps_equal_causal_op(kind):
    n = 10
    q, k, v = qkv(B=2, H=2, L=n, S=n, d=8, dv=5)
    if kind == "cosformer":
        full = attnkit.cosformer_attention(q, k, v, causal=True)
    else:
        full = attnkit.linear_attention(q, k, v, kind, causal=True)
    state = attnkit.RecurrentState()
    outs = []
    for t in range(n):
        sl = slice(t, t + 1)
        if kind == "cosformer":
            y, state = attnkit.cosformer_attention_step(state, q[:, :, sl], k[:, :, sl],
                                                        v[:, :, sl], horizon=n)
        else:
            y, state = attnkit.linear_attention_step(state, q[:, :, sl], k[:, :, sl],
                                                     v[:, :, sl], kind)
        outs.append(y)
    assert state.position == n
    torch.testing.assert_close(torch.cat(outs, 2), full, atol=1e-10, rtol=1e-10)


# ---- errors -----------------------------------------------------------------------------------------

def test_errors_are_one_line_and_name_the_op():
    q, k, v = qkv()
    with pytest.raises(RuntimeError, match=r"^attnkit::feature_attention: feature must be") as e:
        ops.feature_attention(q, k, v, "favor", False, None, None)
    assert "\n" not in str(e.value)
    with pytest.raises(RuntimeError, match=r"attnkit::flash_attention: ") as e:
        ops.flash_attention(q, k[:, :, :, :3], v, None, False, 1.0, 0.0, 0)
    assert "\n" not in str(e.value).strip()
    with pytest.raises(RuntimeError, match="prefix_lengths must lie in"):
        ops.feature_attention(q, k, v, "elu", False, None, torch.tensor([8, 1]))
    with pytest.raises(RuntimeError, match="float32 or float64"):
        ops.causal_product(q.half(), k.half(), v.half(), False)


def test_non_cpu_tensors_are_refused_in_one_line():
    q, k, v = qkv()
    meta = [t.to("meta") for t in (q, k, v)]
    with pytest.raises(RuntimeError, match=r"^attnkit\.softmax_attention: attnkit runs on the CPU "
                                           r"only, got a tensor on meta$"):
        attnkit.softmax_attention(*meta)
    with pytest.raises(RuntimeError, match=r"^attnkit\.linear_attention: .*meta$"):
        attnkit.linear_attention(*meta)
    if torch.cuda.is_available():  # the C++ ops themselves (run on a machine with a GPU)
        cuda = [t.cuda() for t in (q, k, v)]
        with pytest.raises(RuntimeError, match=r"^attnkit::causal_product: attnkit runs on the "
                                               r"CPU only, got a tensor on cuda:0$"):
            ops.causal_product(*cuda, False)
        with pytest.raises(RuntimeError, match=r"^attnkit::flash_attention: .* on cuda:0$"):
            ops.flash_attention(*cuda, None, False, 1.0, 0.0, 0)


# ---- the build: one OpenMP runtime, the kernels' instruction sets -------------------------------

def test_one_openmp_runtime_is_loaded():
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps
                    if "libgomp" in line or "libomp" in line or "libiomp" in line}
    assert len(runtimes) == 1, runtimes


def test_parallel_kernels_match_serial():
    """The kernels' OpenMP loop (src/ops/cpu/parallel.cpp) on the wheel's runtime: 2 threads give
    the same result as 1 (each batch·head is computed by one thread)."""
    q, k, v = qkv(B=2, H=4, L=64, S=64, d=16, dv=16, dtype=torch.float32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = attnkit.linear_attention(q, k, v, "elu", causal=True)
        torch.set_num_threads(2)
        two = attnkit.linear_attention(q, k, v, "elu", causal=True)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


@pytest.mark.skipif(os.environ.get("ATTNKIT_KERNEL_ISA") is not None,
                    reason="ATTNKIT_KERNEL_ISA already forced")
def test_forced_baseline_isa_agrees(tmp_path):
    """The per-ISA copies are compiled in: a subprocess forced to the baseline copy computes what
    the default copy computes (to float32 rounding)."""
    import subprocess
    import sys
    script = (
        "import torch, attnkit\n"
        "torch.manual_seed(0)\n"
        "q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))\n"
        "torch.save(attnkit.softmax_attention(q, k, v, causal=True), %r)\n")
    outs = []
    for isa in ("baseline", "auto"):
        path = tmp_path / f"{isa}.pt"
        env = dict(os.environ, ATTNKIT_KERNEL_ISA=isa, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-c", script % str(path)], check=True, env=env)
        outs.append(torch.load(path))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
