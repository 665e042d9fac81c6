"""attnkit as a transformers attention backend: tiny BERT, GPT-2 and Llama (grouped-query
attention) models made by transformers, attn_implementation="attnkit" against "sdpa"."""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import attnkit.transformers  # noqa: E402

attnkit.transformers.register()


def tiny(family):
    if family == "bert":
        config = transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=64,
                                          max_position_embeddings=64)
        cls = transformers.BertModel
    elif family == "gpt2":
        config = transformers.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4,
                                          n_positions=64)
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2,
                                           intermediate_size=64, max_position_embeddings=64)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    # One config each: from_config sets the implementation on the config it is given.
    sdpa = cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = cls._from_config(copy.deepcopy(config), attn_implementation="attnkit").eval()
    ours.load_state_dict(sdpa.state_dict())
    assert sdpa.config._attn_implementation == "sdpa"
    assert ours.config._attn_implementation == "attnkit"
    return sdpa, ours


def first_output(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_outputs_and_gradients_equal_sdpa(family):
    sdpa, ours = tiny(family)
    assert ours.config._attn_implementation == "attnkit"
    ids = torch.randint(0, 97, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0  # right padding in the second row
    outs = []
    for model in (sdpa, ours):
        model.zero_grad()
        y = first_output(model(input_ids=ids, attention_mask=mask))
        (y * mask.unsqueeze(-1)).pow(2).sum().backward()
        outs.append((y.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                  if p.grad is not None}))
    (y_ref, g_ref), (y, g) = outs
    real = mask.bool()
    torch.testing.assert_close(y[real], y_ref[real], atol=1e-5, rtol=1e-5)
    assert g.keys() == g_ref.keys() and len(g) > 10
    for name in g:
        torch.testing.assert_close(g[name], g_ref[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_attnkit_kernel_actually_runs(monkeypatch, family):
    """The backend is not silently sdpa: count the calls into attnkit's op."""
    _, ours = tiny(family)
    calls = []
    real = attnkit.transformers.softmax_attention
    monkeypatch.setattr(attnkit.transformers, "softmax_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    ours(input_ids=torch.randint(0, 97, (1, 5)))
    assert len(calls) == ours.config.num_hidden_layers == 2


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_generate_gives_the_same_ids(family):
    sdpa, ours = tiny(family)
    ids = torch.randint(1, 97, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0  # left padding, as generation uses it
    kwargs = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    a = sdpa.generate(ids, **kwargs)
    b = ours.generate(ids, **kwargs)
    assert a.shape == (2, 18)
    assert torch.equal(a, b)
