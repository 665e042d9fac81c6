#!/usr/bin/python3
"""Peer values for tests/layers/multi_head_attention_test.cpp:
    mha_reference.py CASES.safetensors OUT.safetensors

CASES holds, per case C, C.x [B, L, E], C.memory [B, S, M] (cross attention only), attnkit's
projections C.{q,k,v,o}.{weight,bias} (torch.nn.Linear layout), C.grad_output [B, L, E] and
optionally C.key_valid [B, S] (bool, true = real key) and C.mask (bool, true = may attend, or
additive; [B, H, L, S]); the metadata maps C to JSON {heads, key_size, value_size, causal, bias}.

OUT gets, per case, C.output, C.weights [B, H, L, S], C.weights_average [B, L, S] and
C.grad.{x, memory, q.weight, ...}: the gradients of sum(output * grad_output).

The peer is torch.nn.MultiheadAttention (float64, batch_first, in_proj_weight packed [3E, E], or
q/k/v_proj_weight when the memory width differs: kdim = vdim = M). Torch ties every head's size to
E / heads; cases with other key/value sizes use a textbook formula written here instead, which
is first checked against torch.nn.MultiheadAttention on every case torch can run.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402

PROJECTIONS = ("q", "k", "v", "o")


def attnkit_allowed(case, B, H, L, S):
    """attnkit's bool "may attend" [B, H, L, S] for the bool parts (padding, causal, bool mask),
    and the additive mask [B, H, L, S] (zeros if none)."""
    allowed = torch.ones(B, H, L, S, dtype=torch.bool)
    additive = torch.zeros(B, H, L, S, dtype=torch.float64)
    if "key_valid" in case:
        allowed &= case["key_valid"].view(B, 1, 1, S)
    if "mask" in case:
        if case["mask"].dtype == torch.bool:
            allowed &= case["mask"].expand(B, H, L, S)
        else:
            additive = additive + case["mask"].expand(B, H, L, S)
    if case["meta"]["causal"]:
        # Bottom-right aligned: query i sits at position i + S - L.
        i = torch.arange(L).view(L, 1)
        j = torch.arange(S).view(1, S)
        allowed &= (j <= i + (S - L)).view(1, 1, L, S)
    return allowed, additive


def textbook(case, x, memory, w):
    """softmax(q kᵀ / √dk + mask) v per head, then the output projection -> (output, weights)."""
    meta = case["meta"]
    H, dk, dv = meta["heads"], meta["key_size"], meta["value_size"]
    B, L, _ = x.shape
    S = memory.shape[1]
    q = F.linear(x, w["q.weight"], w.get("q.bias")).view(B, L, H, dk).transpose(1, 2)
    k = F.linear(memory, w["k.weight"], w.get("k.bias")).view(B, S, H, dk).transpose(1, 2)
    v = F.linear(memory, w["v.weight"], w.get("v.bias")).view(B, S, H, dv).transpose(1, 2)
    allowed, additive = attnkit_allowed(case, B, H, L, S)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dk) + additive
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    context = (weights @ v).transpose(1, 2).reshape(B, L, H * dv)
    return F.linear(context, w["o.weight"], w.get("o.bias")), weights


def torch_mha(case, x, memory, w, average):
    """torch.nn.MultiheadAttention on attnkit's weights -> (output, weights, module)."""
    meta = case["meta"]
    H = meta["heads"]
    B, L, E = x.shape
    S, M = memory.shape[1], memory.shape[2]
    mha = torch.nn.MultiheadAttention(E, H, bias=meta["bias"], kdim=M, vdim=M, batch_first=True,
                                      dtype=torch.float64)
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(torch.cat([w["q.weight"], w["k.weight"], w["v.weight"]]))
        else:
            mha.q_proj_weight.copy_(w["q.weight"])
            mha.k_proj_weight.copy_(w["k.weight"])
            mha.v_proj_weight.copy_(w["v.weight"])
        mha.out_proj.weight.copy_(w["o.weight"])
        if meta["bias"]:
            mha.in_proj_bias.copy_(torch.cat([w["q.bias"], w["k.bias"], w["v.bias"]]))
            mha.out_proj.bias.copy_(w["o.bias"])
    # torch's masks say what may NOT be attended. Padding goes through key_padding_mask, a bool
    # mask stays bool ([B·H, L, S]), causality joins the mask or is the [L, S] mask by itself.
    key_padding_mask = ~case["key_valid"] if "key_valid" in case else None
    blocked = None
    if meta["causal"]:
        i = torch.arange(L).view(L, 1)
        j = torch.arange(S).view(1, S)
        blocked = j > i + (S - L)  # bottom-right aligned
    attn_mask = blocked
    if "mask" in case:
        full = case["mask"].expand(B, H, L, S)
        if full.dtype == torch.bool:
            attn_mask = ~full if blocked is None else ~full | blocked
        else:
            attn_mask = full if blocked is None else full.masked_fill(blocked, float("-inf"))
        attn_mask = attn_mask.reshape(B * H, L, S)
    output, weights = mha(x, memory, memory, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                          need_weights=True, average_attn_weights=average)
    return output, weights, mha


def torch_parameter_grads(mha, meta, E):
    """Gradients of the packed torch parameters, split back into attnkit's q/k/v/o names."""
    g = {}
    if mha._qkv_same_embed_dim:
        g["q.weight"], g["k.weight"], g["v.weight"] = mha.in_proj_weight.grad.split(E)
    else:
        g["q.weight"], g["k.weight"], g["v.weight"] = (
            mha.q_proj_weight.grad, mha.k_proj_weight.grad, mha.v_proj_weight.grad)
    g["o.weight"] = mha.out_proj.weight.grad
    if meta["bias"]:
        g["q.bias"], g["k.bias"], g["v.bias"] = mha.in_proj_bias.grad.split(E)
        g["o.bias"] = mha.out_proj.bias.grad
    return g


def run_case(name, case):
    meta = case["meta"]
    E = case["x"].shape[2]
    cross = "memory" in case
    x = case["x"].clone().requires_grad_(True)
    memory = case["memory"].clone().requires_grad_(True) if cross else x
    w = {key: case[key].clone().requires_grad_(True) for key in case
         if key.split(".")[0] in PROJECTIONS}
    torch_sizes = meta["key_size"] * meta["heads"] == E and meta["value_size"] * meta["heads"] == E
    out = {}

    output, weights = textbook(case, x, memory, w)
    if torch_sizes:
        # The textbook formula must agree with torch wherever torch applies.
        peer_output, peer_weights, mha = torch_mha(case, x, memory, w, average=False)
        err = max((peer_output - output).abs().max().item(), (peer_weights - weights).abs().max().item())
        if err > 1e-12:
            raise SystemExit(f"mha_reference: case {name}: textbook formula differs from "
                             f"torch.nn.MultiheadAttention by {err}")
        output, weights = peer_output, peer_weights
        _, average, _ = torch_mha(case, x, memory, w, average=True)
        out[f"{name}.weights_average"] = average.detach()
        output.backward(case["grad_output"])
        grads = torch_parameter_grads(mha, meta, E)
    else:
        out[f"{name}.weights_average"] = weights.detach().mean(1)
        output.backward(case["grad_output"])
        grads = {key: t.grad for key, t in w.items()}
    out[f"{name}.output"] = output.detach()
    out[f"{name}.weights"] = weights.detach()
    out[f"{name}.peer"] = torch.tensor([1 if torch_sizes else 0], dtype=torch.int64)
    out[f"{name}.grad.x"] = x.grad
    if cross:
        out[f"{name}.grad.memory"] = memory.grad
    for key, g in grads.items():
        out[f"{name}.grad.{key}"] = g
    return out


def main(argv):
    if len(argv) != 3:
        raise SystemExit("usage: mha_reference.py CASES.safetensors OUT.safetensors")
    tensors, metadata = hf.load_safetensors_with_metadata(argv[1])
    cases = {}
    for name, text in (metadata or {}).items():
        prefix = name + "."
        cases[name] = {key[len(prefix):]: t for key, t in tensors.items() if key.startswith(prefix)}
        cases[name]["meta"] = json.loads(text)
    results = {}
    for name, case in cases.items():
        results.update(run_case(name, case))
    hf.save_safetensors(argv[2], results)


if __name__ == "__main__":
    main(sys.argv)
