"""attnkit.nn: the modules against torch.nn.MultiheadAttention, state_dict save/load, and
torch.compile(fullgraph=True) of a small model using every kind."""
import pytest
import torch
from torch import nn

import attnkit
import attnkit.nn as ann

KINDS = ["softmax", "linear:elu", "linear:relu", "linear:favor:32:1", "cosformer"]


class Block(nn.Module):
    """A pre-norm transformer block per kind, stacked: the small model of the compile test."""

    def __init__(self, kinds=KINDS, dim=16, heads=2, causal=True):
        super().__init__()
        self.attn = nn.ModuleList(ann.MultiheadAttention(dim, heads, kind=kind, causal=causal)
                                  for kind in kinds)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in kinds)
        self.head = nn.Linear(dim, 3)

    def forward(self, x, key_padding_mask=None):
        for attn, norm in zip(self.attn, self.norms):
            h = norm(x)
            x = x + attn(h, h, h, key_padding_mask=key_padding_mask)[0]
        return self.head(x)


def test_softmax_kind_equals_torch_multihead_attention():
    torch.manual_seed(1)
    ours = ann.MultiheadAttention(24, 4, kind="softmax")
    theirs = nn.MultiheadAttention(24, 4, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                               ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias,
                                             ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(2, 9, 24)
    real = torch.ones(2, 9, dtype=torch.bool)
    real[1, 6:] = False
    causal = nn.Transformer.generate_square_subsequent_mask(9)
    out, _ = ours(x, x, x, key_padding_mask=real, is_causal=True)
    ref, _ = theirs(x, x, x, key_padding_mask=~real, attn_mask=causal, need_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip(kind, tmp_path):
    torch.manual_seed(2)
    model = ann.MultiheadAttention(16, 2, kind=kind, causal=True)
    x = torch.randn(2, 7, 16)
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    torch.manual_seed(3)  # a different initialisation, overwritten by the load
    loaded = ann.MultiheadAttention(16, 2, kind=kind, causal=True)
    assert not torch.equal(loaded(x)[0], model(x)[0])
    loaded.load_state_dict(torch.load(path))
    torch.testing.assert_close(loaded(x)[0], model(x)[0], atol=0, rtol=0)
    if kind.startswith("linear:favor"):
        assert "attention.projection" in model.state_dict()


def test_unknown_kind_and_masks_are_refused():
    with pytest.raises(ValueError, match="unknown attention kind 'linear:tanh'"):
        ann.MultiheadAttention(8, 2, kind="linear:tanh")
    m = ann.MultiheadAttention(8, 2, kind="cosformer")
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="not an arbitrary attn_mask"):
        m(x, attn_mask=torch.ones(4, 4, dtype=torch.bool))


def test_compile_fullgraph_matches_eager_forward_and_backward():
    torch.manual_seed(4)
    model = Block()
    x = torch.randn(2, 12, 16)
    real = torch.ones(2, 12, dtype=torch.bool)
    real[1, 9:] = False
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    eager_out = model(x)
    out = compiled(x)
    torch.testing.assert_close(out, eager_out, atol=1e-6, rtol=1e-6)
    g = torch.randn_like(out)
    eager_grads = torch.autograd.grad(eager_out, list(model.parameters()), g)
    grads = torch.autograd.grad(out, list(model.parameters()), g)
    for a, b in zip(grads, eager_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # Non-causal with key padding (cosFormer, linear and softmax take it in the fused kernels).
    model2 = Block(kinds=["softmax", "linear:elu", "cosformer"], causal=False)
    compiled2 = torch.compile(model2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled2(x, real), model2(x, real), atol=1e-6, rtol=1e-6)


def test_compile_inductor_fullgraph():
    """The default backend (inductor) around the custom ops: the ops stay calls into attnkit's
    kernels, the rest is generated code."""
    torch.manual_seed(5)
    model = Block(kinds=["softmax", "cosformer"])
    x = torch.randn(2, 10, 16)
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
