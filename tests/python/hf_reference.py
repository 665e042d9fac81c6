#!/usr/bin/python3
"""Independent python3-torch reference for Hugging Face-layout BERT / ALBERT / GPT-2 directories.

Written from the model definitions (HF modeling_bert.py, modeling_albert.py, modeling_gpt2.py
semantics) with nothing but python3-torch and numpy: no `transformers`, no `safetensors` package.
Tests use it to check attnkit's C++ models in both directions:

* `make_model_dir` writes a TINY random model as HF's save_pretrained would (config.json +
  model.safetensors) and a `reference.safetensors` with fixed inputs and the outputs of the
  float64 forward below;
* `forward_model_dir` (CLI `forward`) reads ANY HF-layout directory of those three types
  (names with or without the task-model prefix, legacy buffers skipped, tied weights absent) and
  computes the outputs from config.json, so it also checks directories that attnkit writes.

Library:
    save_safetensors(path, tensors, metadata=None)
    load_safetensors(path) -> {name: tensor}
    load_safetensors_with_metadata(path) -> ({name: tensor}, {str: str} or None)
    make_model_dir(model_type, out_dir, seed=0, **options) -> {"config": dict, "weights": dict,
                                                                 "reference": dict}
    load_model_dir(model_dir) -> (config, {name: tensor})
    forward_model_dir(model_dir, input_ids, token_type_ids=None, attention_mask=None)
        -> {output name: float64 tensor}
    forward(config, tensors, input_ids, token_type_ids=None, attention_mask=None) -> same

CLI:
    hf_reference.py make --model-type {bert,albert,gpt2} --out DIR [--seed S] [--prefix]
                         [--legacy-buffers] [--legacy-bias-dtype {U8,BOOL,F32}]
    hf_reference.py forward --model DIR --ids "101 7 8 102" [--token-type-ids "0 0 1 1"]
                            [--attention-mask "1 1 1 0"] --out FILE.safetensors

Output tensors (reference.safetensors and `forward --out`; activations computed in float64,
saved as F32; ids as I64):
    input_ids [B, n]; token_type_ids [B, n] (BERT/ALBERT always, GPT-2 only when given);
    attention_mask [B, n] (only when given)
    BERT/ALBERT: last_hidden_state [B, n, H]; pooler_output [B, H] (when the checkpoint has a
        pooler); hidden_states.{k} for k = 0..L (0 = embedding output; ALBERT: after
        embedding_hidden_mapping_in, as HF); mlm_logits [B, n, V] (when the MLM head is present);
        seq_relationship_logits [B, 2] (BERT NSP head) / sop_logits [B, 2] (ALBERT SOP head)
    GPT-2: last_hidden_state [B, n, H] (after ln_f); logits [B, n, V] (tied to wte, or
        lm_head.weight when present); hidden_states.{k} for k = 0..L (0 = wte + wpe, k = 1..L-1 the
        block outputs, L = ln_f(block L output), exactly as HF's output_hidden_states)
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch

# --------------------------------------------------------------------------------------------
# safetensors (format: u64 LE header length N, N bytes of JSON header, then the data buffer)
# --------------------------------------------------------------------------------------------

# name -> (torch dtype, little-endian numpy dtype used for the bytes, element size)
SAFETENSORS_DTYPES = {
    "F64": (torch.float64, "<f8", 8),
    "F32": (torch.float32, "<f4", 4),
    "F16": (torch.float16, "<f2", 2),
    "BF16": (torch.bfloat16, "<i2", 2),  # raw 16-bit patterns, reinterpreted as bfloat16
    "I64": (torch.int64, "<i8", 8),
    "I32": (torch.int32, "<i4", 4),
    "I16": (torch.int16, "<i2", 2),
    "I8": (torch.int8, "i1", 1),
    "U8": (torch.uint8, "u1", 1),
    "BOOL": (torch.bool, "u1", 1),
}
_TORCH_TO_ST = {v[0]: k for k, v in SAFETENSORS_DTYPES.items()}
# The Rust crate's Dtype enum, "in increasing alignment order"; serialize() sorts tensors by this
# enum descending, then by name. So I64 precedes F64, F32 precedes I32, BF16 > F16 > I16, ...
_RUST_DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
                     "I32", "U32", "F32", "F64", "I64", "U64"]
_MAX_HEADER = 100_000_000


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy()
    else:
        arr = t.numpy()
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        arr = arr.byteswap()
    return arr.tobytes()


def safetensors_header_bytes(tensors, metadata=None):
    """(header bytes incl. padding, ordered [(name, tensor)]) exactly as the Rust crate lays out."""
    entries = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"safetensors: tensor name {name!r} is not a string")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"safetensors: {name!r} is {type(t).__name__}, not a torch.Tensor")
        if t.dtype not in _TORCH_TO_ST:
            raise TypeError(f"safetensors: {name!r} has unsupported dtype {t.dtype}")
        entries.append((name, t))
    entries.sort(key=lambda e: (-_RUST_DTYPE_ORDER.index(_TORCH_TO_ST[e[1].dtype]), e[0]))
    header = {}
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("safetensors: __metadata__ must map str to str")
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    offset = 0
    for name, t in entries:
        code = _TORCH_TO_ST[t.dtype]
        n = t.numel() * SAFETENSORS_DTYPES[code][2]
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    buf = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    buf += b" " * ((8 - len(buf) % 8) % 8)
    return buf, entries


def save_safetensors(path, tensors, metadata=None):
    """Write {name: torch.Tensor} as safetensors, byte-compatible with the reference crate:
    tensors sorted by dtype alignment (descending, Rust enum order) then name, contiguous
    data_offsets, compact JSON header padded with spaces to a multiple of 8 bytes,
    optional "__metadata__" (str -> str) first."""
    header, entries = safetensors_header_bytes(tensors, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for _, t in entries:
            f.write(_tensor_bytes(t))


def load_safetensors_with_metadata(path):
    """Read a safetensors file -> ({name: tensor} in file order, metadata dict or None).
    Validates the header the way the reference crate does; raises ValueError otherwise."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _MAX_HEADER:
        raise ValueError(f"{path}: safetensors header of {n} bytes is too large")
    if 8 + n > len(data):
        raise ValueError(f"{path}: safetensors header length {n} runs past the end of the file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: safetensors header is not UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and (not isinstance(metadata, dict) or
                                 not all(isinstance(v, str) for v in metadata.values())):
        raise ValueError(f"{path}: __metadata__ must map strings to strings")
    buf = memoryview(data)[8 + n:]
    infos = []
    for name, info in header.items():
        try:
            code, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise ValueError(f"{path}: bad header entry for {name!r}: {info!r}") from None
        if code not in SAFETENSORS_DTYPES:
            raise ValueError(f"{path}: {name!r} has unsupported dtype {code!r}")
        if not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"{path}: {name!r} has a bad shape {shape!r}")
        infos.append((begin, end, name, code, shape))
    infos.sort(key=lambda e: (e[0], e[1]))
    out, expect = {}, 0
    for begin, end, name, code, shape in infos:
        if begin != expect or end < begin:
            raise ValueError(f"{path}: data_offsets of {name!r} are not contiguous")
        tdtype, npdtype, size = SAFETENSORS_DTYPES[code]
        if end - begin != math.prod(shape) * size:
            raise ValueError(f"{path}: {name!r}: {end - begin} bytes for {code} {shape}")
        expect = end
        arr = np.frombuffer(buf[begin:end], dtype=np.dtype(npdtype)).astype(
            np.dtype(npdtype).newbyteorder("="), copy=True)
        t = torch.from_numpy(arr).reshape(shape)
        if code == "BF16":
            t = t.view(torch.bfloat16)
        elif code == "BOOL":
            t = t != 0
        out[name] = t
    if expect != len(buf):
        raise ValueError(f"{path}: data buffer is {len(buf)} bytes, tensors cover {expect}")
    return out, metadata


def load_safetensors(path):
    """Read a safetensors file -> {name: torch.Tensor} (CPU, in file order)."""
    return load_safetensors_with_metadata(path)[0]


# --------------------------------------------------------------------------------------------
# Math (float64 in, float64 out); written from the textbook formulas
# --------------------------------------------------------------------------------------------

def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


ACTIVATIONS = {
    "gelu": gelu_erf, "gelu_python": gelu_erf,
    "gelu_new": gelu_tanh, "gelu_fast": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": torch.relu, "silu": lambda x: x * torch.sigmoid(x),
    "swish": lambda x: x * torch.sigmoid(x), "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}


def activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r} (known: {', '.join(sorted(ACTIVATIONS))})")
    return ACTIVATIONS[name]


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def linear(x, weight, bias=None):
    """nn.Linear: weight [out, in]."""
    y = x @ weight.transpose(0, 1)
    return y if bias is None else y + bias


def conv1d(x, weight, bias):
    """HF GPT-2 Conv1D: weight [in, out]."""
    return x @ weight + bias


# HF turns a 0/1 attention mask into (1 - mask) * finfo(model dtype).min; the models are float32.
MASK_MIN = torch.finfo(torch.float32).min


def multi_head_attention(q, k, v, num_heads, scale, causal=False, additive_mask=None):
    """q, k, v [batch, seq, hidden] -> context [batch, seq, hidden]; explicit n x n scores."""
    b, n, h = q.shape
    d = h // num_heads

    def heads(x):
        return x.reshape(b, x.shape[1], num_heads, d).permute(0, 2, 1, 3)  # [b, heads, seq, d]

    q, k, v = heads(q), heads(k), heads(v)
    scores = (q @ k.transpose(-1, -2)) * scale  # [b, heads, n, s]
    if causal:
        s = k.shape[2]
        allowed = torch.ones(n, s, dtype=torch.bool).tril(s - n)
        scores = torch.where(allowed, scores, torch.full_like(scores, MASK_MIN))
    if additive_mask is not None:
        scores = scores + additive_mask  # [b, 1, 1, s]
    scores = scores - scores.max(-1, keepdim=True).values
    probs = torch.exp(scores)
    probs = probs / probs.sum(-1, keepdim=True)
    ctx = probs @ v  # [b, heads, n, d]
    return ctx.permute(0, 2, 1, 3).reshape(b, n, h)


def additive_from_attention_mask(attention_mask, dtype=torch.float64):
    if attention_mask is None:
        return None
    m = attention_mask.to(dtype)[:, None, None, :]
    return (1.0 - m) * MASK_MIN


def post_ln_block(x, p, names, num_heads, eps, act, additive_mask=None):
    """BERT / ALBERT encoder layer (post-LayerNorm). `names` maps roles to tensor names:
    q, k, v, o (attention output projection), ln1, ffn_in, ffn_out, ln2 (each + .weight/.bias)."""
    w = lambda role: p[names[role] + ".weight"]  # noqa: E731
    bb = lambda role: p[names[role] + ".bias"]  # noqa: E731
    h = x.shape[-1]
    ctx = multi_head_attention(linear(x, w("q"), bb("q")), linear(x, w("k"), bb("k")),
                               linear(x, w("v"), bb("v")), num_heads,
                               1.0 / math.sqrt(h // num_heads), additive_mask=additive_mask)
    attn_out = layer_norm(x + linear(ctx, w("o"), bb("o")), w("ln1"), bb("ln1"), eps)
    ffn = linear(act(linear(attn_out, w("ffn_in"), bb("ffn_in"))), w("ffn_out"), bb("ffn_out"))
    return layer_norm(attn_out + ffn, w("ln2"), bb("ln2"), eps)


def bert_layer_names(prefix):
    """Role -> HF BERT tensor name (without .weight/.bias) for one encoder.layer.{i}."""
    return {"q": prefix + "attention.self.query", "k": prefix + "attention.self.key",
            "v": prefix + "attention.self.value", "o": prefix + "attention.output.dense",
            "ln1": prefix + "attention.output.LayerNorm", "ffn_in": prefix + "intermediate.dense",
            "ffn_out": prefix + "output.dense", "ln2": prefix + "output.LayerNorm"}


def albert_layer_names(prefix):
    return {"q": prefix + "attention.query", "k": prefix + "attention.key",
            "v": prefix + "attention.value", "o": prefix + "attention.dense",
            "ln1": prefix + "attention.LayerNorm", "ffn_in": prefix + "ffn",
            "ffn_out": prefix + "ffn_output", "ln2": prefix + "full_layer_layer_norm"}


def bert_layer(params, index, x, num_heads, eps=1e-12, hidden_act="gelu", attention_mask=None):
    """One HF BERT encoder layer `encoder.layer.{index}` (names without the "bert." prefix)."""
    return post_ln_block(x, params, bert_layer_names(f"encoder.layer.{index}."), num_heads, eps,
                         activation(hidden_act), additive_from_attention_mask(attention_mask, x.dtype))


# --------------------------------------------------------------------------------------------
# Config access
# --------------------------------------------------------------------------------------------

_MISSING = object()


def _get(cfg, *keys, default=_MISSING):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    if default is _MISSING:
        raise ValueError(f"config.json lacks {' / '.join(keys)}")
    return default


def _check_shape(p, name, shape):
    if name not in p:
        raise ValueError(f"checkpoint lacks tensor {name!r}")
    if list(p[name].shape) != list(shape):
        raise ValueError(f"tensor {name!r} has shape {list(p[name].shape)}, config implies {list(shape)}")


def _check_ids(input_ids, vocab, what="input_ids"):
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
        raise ValueError(f"{what} must lie in [0, {vocab}); got {input_ids.tolist()}")


def _common_inputs(input_ids, token_type_ids, attention_mask):
    input_ids = torch.as_tensor(input_ids, dtype=torch.int64)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must be [batch, seq] with seq >= 1, got {list(input_ids.shape)}")

    def like(t, what):
        if t is None:
            return None
        t = torch.as_tensor(t, dtype=torch.int64)
        if t.dim() == 1:
            t = t[None]
        if t.shape != input_ids.shape:
            raise ValueError(f"{what} has shape {list(t.shape)}, input_ids {list(input_ids.shape)}")
        return t

    return input_ids, like(token_type_ids, "token_type_ids"), like(attention_mask, "attention_mask")


# --------------------------------------------------------------------------------------------
# Forwards (float64); params are names WITHOUT the task prefix, heads keep their own names
# --------------------------------------------------------------------------------------------

def _embeddings_bert_like(p, cfg, input_ids, token_type_ids, width):
    b, n = input_ids.shape
    max_pos = _get(cfg, "max_position_embeddings")
    if n > max_pos:
        raise ValueError(f"sequence of {n} tokens exceeds max_position_embeddings {max_pos}")
    pos_type = _get(cfg, "position_embedding_type", default="absolute")
    if pos_type != "absolute":
        raise ValueError(f"position_embedding_type {pos_type!r} is not supported (absolute only)")
    vocab = _get(cfg, "vocab_size")
    _check_ids(input_ids, vocab)
    _check_shape(p, "embeddings.word_embeddings.weight", [vocab, width])
    _check_shape(p, "embeddings.position_embeddings.weight", [max_pos, width])
    x = p["embeddings.word_embeddings.weight"][input_ids]
    x = x + p["embeddings.position_embeddings.weight"][torch.arange(n)][None]
    if "embeddings.token_type_embeddings.weight" in p:
        tt = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        _check_ids(tt, p["embeddings.token_type_embeddings.weight"].shape[0], "token_type_ids")
        x = x + p["embeddings.token_type_embeddings.weight"][tt]
    eps = _get(cfg, "layer_norm_eps", default=1e-12)
    return layer_norm(x, p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"], eps)


def bert_forward(cfg, p, heads, input_ids, token_type_ids=None, attention_mask=None):
    hidden = _get(cfg, "hidden_size")
    num_heads = _get(cfg, "num_attention_heads")
    num_layers = _get(cfg, "num_hidden_layers")
    eps = _get(cfg, "layer_norm_eps", default=1e-12)
    act = activation(_get(cfg, "hidden_act", default="gelu"))
    if hidden % num_heads:
        raise ValueError(f"hidden_size {hidden} is not a multiple of num_attention_heads {num_heads}")
    mask = additive_from_attention_mask(attention_mask)
    x = _embeddings_bert_like(p, cfg, input_ids, token_type_ids, hidden)
    out = {"hidden_states.0": x}
    for i in range(num_layers):
        names = bert_layer_names(f"encoder.layer.{i}.")
        _check_shape(p, names["q"] + ".weight", [hidden, hidden])
        x = post_ln_block(x, p, names, num_heads, eps, act, mask)
        out[f"hidden_states.{i + 1}"] = x
    out["last_hidden_state"] = x
    if "pooler.dense.weight" in p:
        out["pooler_output"] = torch.tanh(linear(x[:, 0], p["pooler.dense.weight"], p["pooler.dense.bias"]))
    if "cls.predictions.transform.dense.weight" in heads:
        out["mlm_logits"] = mlm_head(x, p, heads, "cls.predictions.transform.dense",
                                     "cls.predictions.transform.LayerNorm", "cls.predictions", act, eps)
    if "cls.seq_relationship.weight" in heads and "pooler_output" in out:
        out["seq_relationship_logits"] = linear(out["pooler_output"], heads["cls.seq_relationship.weight"],
                                                heads["cls.seq_relationship.bias"])
    return out


def mlm_head(x, p, heads, dense, norm, predictions, act, eps):
    """BERT/ALBERT masked-LM head: dense -> act -> LayerNorm -> decoder (tied to the word
    embeddings when absent) + bias; the module names differ between the two families."""
    t = act(linear(x, heads[dense + ".weight"], heads[dense + ".bias"]))
    t = layer_norm(t, heads[norm + ".weight"], heads[norm + ".bias"], eps)
    decoder = heads.get(predictions + ".decoder.weight", p["embeddings.word_embeddings.weight"])
    bias = heads.get(predictions + ".bias", heads.get(predictions + ".decoder.bias"))
    return linear(t, decoder, bias)


def albert_forward(cfg, p, heads, input_ids, token_type_ids=None, attention_mask=None):
    hidden = _get(cfg, "hidden_size")
    emb = _get(cfg, "embedding_size", default=128)
    num_heads = _get(cfg, "num_attention_heads")
    num_layers = _get(cfg, "num_hidden_layers")
    groups = _get(cfg, "num_hidden_groups", default=1)
    inner = _get(cfg, "inner_group_num", default=1)
    eps = _get(cfg, "layer_norm_eps", default=1e-12)
    act = activation(_get(cfg, "hidden_act", default="gelu_new"))
    if hidden % num_heads:
        raise ValueError(f"hidden_size {hidden} is not a multiple of num_attention_heads {num_heads}")
    mask = additive_from_attention_mask(attention_mask)
    e = _embeddings_bert_like(p, cfg, input_ids, token_type_ids, emb)
    _check_shape(p, "encoder.embedding_hidden_mapping_in.weight", [hidden, emb])
    x = linear(e, p["encoder.embedding_hidden_mapping_in.weight"], p["encoder.embedding_hidden_mapping_in.bias"])
    out = {"hidden_states.0": x}
    for i in range(num_layers):
        group = int(i / (num_layers / groups))  # HF AlbertTransformer's group index
        for j in range(inner):
            names = albert_layer_names(f"encoder.albert_layer_groups.{group}.albert_layers.{j}.")
            _check_shape(p, names["q"] + ".weight", [hidden, hidden])
            x = post_ln_block(x, p, names, num_heads, eps, act, mask)
        out[f"hidden_states.{i + 1}"] = x  # one entry per group application, as HF
    out["last_hidden_state"] = x
    if "pooler.weight" in p:
        out["pooler_output"] = torch.tanh(linear(x[:, 0], p["pooler.weight"], p["pooler.bias"]))
    if "predictions.dense.weight" in heads:
        out["mlm_logits"] = mlm_head(x, p, heads, "predictions.dense", "predictions.LayerNorm",
                                     "predictions", act, eps)
    if "sop_classifier.classifier.weight" in heads and "pooler_output" in out:
        out["sop_logits"] = linear(out["pooler_output"], heads["sop_classifier.classifier.weight"],
                                   heads["sop_classifier.classifier.bias"])
    return out


def gpt2_forward(cfg, p, heads, input_ids, token_type_ids=None, attention_mask=None):
    hidden = _get(cfg, "n_embd", "hidden_size")
    num_heads = _get(cfg, "n_head", "num_attention_heads")
    num_layers = _get(cfg, "n_layer", "num_hidden_layers")
    n_pos = _get(cfg, "n_positions", "max_position_embeddings")
    vocab = _get(cfg, "vocab_size")
    eps = _get(cfg, "layer_norm_epsilon", default=1e-5)
    act = activation(_get(cfg, "activation_function", default="gelu_new"))
    inner = _get(cfg, "n_inner", default=4 * hidden)
    scale_weights = _get(cfg, "scale_attn_weights", default=True)
    by_layer = _get(cfg, "scale_attn_by_inverse_layer_idx", default=False)
    if hidden % num_heads:
        raise ValueError(f"n_embd {hidden} is not a multiple of n_head {num_heads}")
    b, n = input_ids.shape
    if n > n_pos:
        raise ValueError(f"sequence of {n} tokens exceeds n_positions {n_pos}")
    _check_ids(input_ids, vocab)
    _check_shape(p, "wte.weight", [vocab, hidden])
    _check_shape(p, "wpe.weight", [n_pos, hidden])
    x = p["wte.weight"][input_ids] + p["wpe.weight"][torch.arange(n)][None]
    if token_type_ids is not None:  # HF GPT-2 embeds token types with wte
        _check_ids(token_type_ids, vocab, "token_type_ids")
        x = x + p["wte.weight"][token_type_ids]
    mask = additive_from_attention_mask(attention_mask)
    out = {}
    d = hidden // num_heads
    for i in range(num_layers):
        out[f"hidden_states.{i}"] = x
        pre = f"h.{i}."
        _check_shape(p, pre + "attn.c_attn.weight", [hidden, 3 * hidden])
        _check_shape(p, pre + "mlp.c_fc.weight", [hidden, inner])
        a = layer_norm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], eps)
        qkv = conv1d(a, p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"])
        q, k, v = qkv.split(hidden, dim=-1)
        scale = (1.0 / math.sqrt(d) if scale_weights else 1.0) / ((i + 1) if by_layer else 1)
        ctx = multi_head_attention(q, k, v, num_heads, scale, causal=True, additive_mask=mask)
        x = x + conv1d(ctx, p[pre + "attn.c_proj.weight"], p[pre + "attn.c_proj.bias"])
        m = layer_norm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], eps)
        m = conv1d(act(conv1d(m, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"])),
                   p[pre + "mlp.c_proj.weight"], p[pre + "mlp.c_proj.bias"])
        x = x + m
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], eps)
    out[f"hidden_states.{num_layers}"] = x
    out["last_hidden_state"] = x
    head = heads.get("lm_head.weight", p["wte.weight"])
    out["logits"] = linear(x, head)
    return out


# --------------------------------------------------------------------------------------------
# Checkpoint names
# --------------------------------------------------------------------------------------------

MODEL_TYPES = ("bert", "albert", "gpt2")
BASE_PREFIX = {"bert": "bert.", "albert": "albert.", "gpt2": "transformer."}
HEAD_PREFIXES = {"bert": ("cls.",), "albert": ("predictions.", "sop_classifier."),
                 "gpt2": ("lm_head.",)}
_BUFFER_PATTERNS = {
    "bert": re.compile(r"^embeddings\.(position_ids|token_type_ids)$"),
    "albert": re.compile(r"^embeddings\.(position_ids|token_type_ids)$"),
    "gpt2": re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$"),
}


def detect_model_type(config):
    mt = config.get("model_type")
    if mt in MODEL_TYPES:
        return mt
    for arch in config.get("architectures") or []:
        for prefix, name in (("Bert", "bert"), ("Albert", "albert"), ("GPT2", "gpt2")):
            if arch.startswith(prefix):
                return name
    raise ValueError(f"model_type {mt!r} is not one of {', '.join(MODEL_TYPES)}")


def split_checkpoint(model_type, tensors):
    """-> (base {name without prefix: tensor}, heads {name: tensor}, skipped [names]).
    Accepts names with or without the task prefix (bert. / albert. / transformer.), renames the
    legacy LayerNorm .gamma/.beta to .weight/.bias and skips non-parameter buffers."""
    prefix = BASE_PREFIX[model_type]
    has_prefix = any(k.startswith(prefix) for k in tensors)
    base, heads, skipped = {}, {}, []
    for name, t in tensors.items():
        key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", name))
        if key.startswith(HEAD_PREFIXES[model_type]):
            heads[key] = t
            continue
        if has_prefix:
            if not key.startswith(prefix):
                skipped.append(name)  # another task head (classifier, qa_outputs, ...)
                continue
            key = key[len(prefix):]
        if _BUFFER_PATTERNS[model_type].match(key):
            skipped.append(name)
            continue
        base[key] = t
    return base, heads, skipped


def load_model_dir(model_dir):
    """-> (config dict, {name: tensor}) from config.json + model.safetensors (or a sharded
    model.safetensors.index.json, or pytorch_model.bin as a last resort)."""
    cfg_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise ValueError(f"{model_dir}: no config.json")
    with open(cfg_path, encoding="utf-8") as f:
        config = json.load(f)
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    binary = os.path.join(model_dir, "pytorch_model.bin")
    if os.path.isfile(single):
        tensors = load_safetensors(single)
    elif os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(load_safetensors(os.path.join(model_dir, shard)))
    elif os.path.isfile(binary):
        tensors = torch.load(binary, map_location="cpu", weights_only=True)
    else:
        raise ValueError(f"{model_dir}: no model.safetensors (or index / pytorch_model.bin)")
    return config, tensors


_FORWARDS = {"bert": bert_forward, "albert": albert_forward, "gpt2": gpt2_forward}


def forward(config, tensors, input_ids, token_type_ids=None, attention_mask=None):
    """Float64 forward of an HF checkpoint given as config dict + {name: tensor} -> outputs."""
    model_type = detect_model_type(config)
    input_ids, token_type_ids, attention_mask = _common_inputs(input_ids, token_type_ids, attention_mask)
    base, heads, _ = split_checkpoint(model_type, tensors)
    to64 = lambda d: {k: (v.to(torch.float64) if v.is_floating_point() else v) for k, v in d.items()}  # noqa: E731
    with torch.no_grad():
        out = _FORWARDS[model_type](config, to64(base), to64(heads), input_ids, token_type_ids, attention_mask)
    inputs = {"input_ids": input_ids}
    if token_type_ids is not None:
        inputs["token_type_ids"] = token_type_ids
    elif model_type != "gpt2":
        inputs["token_type_ids"] = torch.zeros_like(input_ids)
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask
    inputs.update(out)
    return inputs


def forward_model_dir(model_dir, input_ids, token_type_ids=None, attention_mask=None):
    config, tensors = load_model_dir(model_dir)
    return forward(config, tensors, input_ids, token_type_ids, attention_mask)


def to_saved(outputs):
    """Activations as F32, ids as I64 (what reference.safetensors / forward --out hold)."""
    return {k: (v.to(torch.float32) if v.is_floating_point() else v.to(torch.int64)).contiguous()
            for k, v in outputs.items()}


# --------------------------------------------------------------------------------------------
# Tiny random models written as HF's save_pretrained would
# --------------------------------------------------------------------------------------------

TRANSFORMERS_VERSION = "4.40.2"

_DEFAULTS = {
    "bert": dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=37, max_position_embeddings=64, type_vocab_size=2),
    "albert": dict(vocab_size=99, hidden_size=32, embedding_size=16, num_hidden_layers=3,
                   num_hidden_groups=1, inner_group_num=1, num_attention_heads=4,
                   intermediate_size=37, max_position_embeddings=64, type_vocab_size=2),
    "gpt2": dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64),
}
_MAKE_OPTIONS = {"prefix", "legacy_buffers", "legacy_bias_dtype", "seq_len", "std", "hidden_act"}


def make_config(model_type, prefix=False, **sizes):
    """config.json content for the model type, with the keys save_pretrained writes."""
    s = dict(_DEFAULTS[model_type])
    s.update(sizes)
    if model_type == "bert":
        cfg = {
            "architectures": ["BertForPreTraining" if prefix else "BertModel"],
            "attention_probs_dropout_prob": 0.1, "classifier_dropout": None,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "hidden_size": s["hidden_size"], "initializer_range": 0.02,
            "intermediate_size": s["intermediate_size"], "layer_norm_eps": 1e-12,
            "max_position_embeddings": s["max_position_embeddings"], "model_type": "bert",
            "num_attention_heads": s["num_attention_heads"],
            "num_hidden_layers": s["num_hidden_layers"], "pad_token_id": 0,
            "position_embedding_type": "absolute", "use_cache": True,
            "type_vocab_size": s["type_vocab_size"], "vocab_size": s["vocab_size"],
        }
    elif model_type == "albert":
        cfg = {
            "architectures": ["AlbertForPreTraining" if prefix else "AlbertModel"],
            "attention_probs_dropout_prob": 0, "bos_token_id": 2, "classifier_dropout_prob": 0.1,
            "embedding_size": s["embedding_size"], "eos_token_id": 3, "hidden_act": "gelu_new",
            "hidden_dropout_prob": 0, "hidden_size": s["hidden_size"],
            "initializer_range": 0.02, "inner_group_num": s["inner_group_num"],
            "intermediate_size": s["intermediate_size"], "layer_norm_eps": 1e-12,
            "max_position_embeddings": s["max_position_embeddings"], "model_type": "albert",
            "num_attention_heads": s["num_attention_heads"],
            "num_hidden_groups": s["num_hidden_groups"],
            "num_hidden_layers": s["num_hidden_layers"], "pad_token_id": 0,
            "position_embedding_type": "absolute", "type_vocab_size": s["type_vocab_size"],
            "vocab_size": s["vocab_size"],
        }
    else:
        v = s["vocab_size"]
        cfg = {
            "activation_function": "gelu_new",
            "architectures": ["GPT2LMHeadModel" if prefix else "GPT2Model"],
            "attn_pdrop": 0.1, "bos_token_id": v - 1, "embd_pdrop": 0.1, "eos_token_id": v - 1,
            "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
            "n_ctx": s["n_positions"], "n_embd": s["n_embd"], "n_head": s["n_head"],
            "n_inner": s.get("n_inner"), "n_layer": s["n_layer"], "n_positions": s["n_positions"],
            "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
            "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
            "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
            "tie_word_embeddings": True, "use_cache": True, "vocab_size": v,
        }
    cfg["torch_dtype"] = "float32"
    cfg["transformers_version"] = TRANSFORMERS_VERSION
    return cfg


def config_json_text(cfg):
    """HF PretrainedConfig.to_json_string: indent 2, keys sorted, trailing newline."""
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


class _Init:
    """Seeded random float32 weights; LayerNorm gains around 1, everything else N(0, std^2)."""

    def __init__(self, seed, std):
        self.gen = torch.Generator().manual_seed(seed)
        self.std = std
        self.out = {}

    def normal(self, name, *shape):
        self.out[name] = torch.randn(*shape, generator=self.gen, dtype=torch.float32) * self.std

    def linear(self, name, n_out, n_in):
        self.normal(name + ".weight", n_out, n_in)
        self.normal(name + ".bias", n_out)

    def conv1d(self, name, n_in, n_out):
        self.normal(name + ".weight", n_in, n_out)
        self.normal(name + ".bias", n_out)

    def layer_norm(self, name, n):
        self.out[name + ".weight"] = 1.0 + torch.randn(n, generator=self.gen) * self.std
        self.normal(name + ".bias", n)


def _random_weights(model_type, cfg, seed, std):
    """-> (base {name: tensor} without prefix, heads {name: tensor}); heads are drawn after the
    base so the base weights do not depend on whether heads are saved."""
    init = _Init(seed, std)
    if model_type in ("bert", "albert"):
        h, v = cfg["hidden_size"], cfg["vocab_size"]
        e = cfg["embedding_size"] if model_type == "albert" else h
        init.normal("embeddings.word_embeddings.weight", v, e)
        init.normal("embeddings.position_embeddings.weight", cfg["max_position_embeddings"], e)
        init.normal("embeddings.token_type_embeddings.weight", cfg["type_vocab_size"], e)
        init.layer_norm("embeddings.LayerNorm", e)
        inter = cfg["intermediate_size"]
        if model_type == "bert":
            for i in range(cfg["num_hidden_layers"]):
                n = bert_layer_names(f"encoder.layer.{i}.")
                for role in ("q", "k", "v", "o"):
                    init.linear(n[role], h, h)
                init.layer_norm(n["ln1"], h)
                init.linear(n["ffn_in"], inter, h)
                init.linear(n["ffn_out"], h, inter)
                init.layer_norm(n["ln2"], h)
            init.linear("pooler.dense", h, h)
        else:
            init.linear("encoder.embedding_hidden_mapping_in", h, e)
            for g in range(cfg["num_hidden_groups"]):
                for j in range(cfg["inner_group_num"]):
                    n = albert_layer_names(f"encoder.albert_layer_groups.{g}.albert_layers.{j}.")
                    for role in ("q", "k", "v", "o"):
                        init.linear(n[role], h, h)
                    init.layer_norm(n["ln1"], h)
                    init.linear(n["ffn_in"], inter, h)
                    init.linear(n["ffn_out"], h, inter)
                    init.layer_norm(n["ln2"], h)
            init.linear("pooler", h, h)
        base = init.out
        init.out = {}
        if model_type == "bert":
            init.linear("cls.predictions.transform.dense", h, h)
            init.layer_norm("cls.predictions.transform.LayerNorm", h)
            init.normal("cls.predictions.bias", v)
            init.linear("cls.seq_relationship", 2, h)
        else:
            init.linear("predictions.dense", e, h)
            init.layer_norm("predictions.LayerNorm", e)
            init.normal("predictions.bias", v)
            init.linear("sop_classifier.classifier", 2, h)
        return base, init.out
    h, v = cfg["n_embd"], cfg["vocab_size"]
    inner = cfg["n_inner"] or 4 * h
    init.normal("wte.weight", v, h)
    init.normal("wpe.weight", cfg["n_positions"], h)
    for i in range(cfg["n_layer"]):
        init.layer_norm(f"h.{i}.ln_1", h)
        init.conv1d(f"h.{i}.attn.c_attn", h, 3 * h)
        init.conv1d(f"h.{i}.attn.c_proj", h, h)
        init.layer_norm(f"h.{i}.ln_2", h)
        init.conv1d(f"h.{i}.mlp.c_fc", h, inner)
        init.conv1d(f"h.{i}.mlp.c_proj", inner, h)
    init.layer_norm("ln_f", h)
    return init.out, {}


def _legacy_buffers(model_type, cfg, bias_dtype):
    if model_type in ("bert", "albert"):
        n = cfg["max_position_embeddings"]
        return {"embeddings.position_ids": torch.arange(n, dtype=torch.int64)[None]}
    n = cfg["n_positions"]
    if bias_dtype not in ("U8", "BOOL", "F32"):
        raise ValueError(f"legacy_bias_dtype must be U8, BOOL or F32, not {bias_dtype!r}")
    tril = torch.ones(n, n).tril().view(1, 1, n, n).to(SAFETENSORS_DTYPES[bias_dtype][0])
    out = {}
    for i in range(cfg["n_layer"]):
        out[f"h.{i}.attn.bias"] = tril.clone()
        out[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float32)
    return out


def make_inputs(model_type, vocab_size, seq_len, seed):
    """Fixed input_ids [1, n] (+ token_type_ids for BERT/ALBERT), drawn from their own generator."""
    if seq_len < (1 if model_type == "gpt2" else 2):
        raise ValueError(f"seq_len {seq_len} is too short for {model_type}")
    gen = torch.Generator().manual_seed(1_000_003 + seed)
    if model_type == "gpt2":
        return {"input_ids": torch.randint(0, vocab_size, (1, seq_len), generator=gen)}
    # [CLS]=2 body [SEP]=3 (ALBERT's real ids; BERT's are 101/102 in a 30522 vocab)
    body = torch.randint(5, vocab_size, (1, seq_len - 2), generator=gen)
    ids = torch.cat([torch.tensor([[2]]), body, torch.tensor([[3]])], 1)
    tt = torch.zeros_like(ids)
    tt[:, (seq_len + 1) // 2:] = 1
    return {"input_ids": ids, "token_type_ids": tt}


def make_model_dir(model_type, out_dir, seed=0, **options):
    """Write a tiny random HF-layout model to out_dir: config.json, model.safetensors and
    reference.safetensors (inputs + float64-forward outputs saved as F32).

    Options: prefix (bool; BERT/ALBERT saved as *ForPreTraining with "bert."/"albert." prefix and
    the MLM (+ NSP/SOP) heads, GPT-2 as GPT2LMHeadModel with "transformer."), legacy_buffers
    (bool; BERT/ALBERT embeddings.position_ids I64 [1, max_pos], GPT-2 h.{i}.attn.bias
    [1, 1, n_pos, n_pos] and h.{i}.attn.masked_bias F32 scalar -1e4), legacy_bias_dtype
    ("U8" default, as transformers 2.x-4.x wrote it; "BOOL" later 4.x; "F32" pytorch-pretrained-
    bert era), seq_len (11), std (0.2), hidden_act, and any size key of the config (vocab_size,
    hidden_size / n_embd, num_hidden_layers / n_layer, num_attention_heads / n_head,
    intermediate_size, n_inner, max_position_embeddings / n_positions, embedding_size,
    num_hidden_groups, inner_group_num, type_vocab_size).
    Returns {"config": dict, "weights": {saved name: tensor}, "reference": {name: tensor}}."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {', '.join(MODEL_TYPES)}, not {model_type!r}")
    unknown = set(options) - _MAKE_OPTIONS - set(_DEFAULTS[model_type]) - {"n_inner"}
    if unknown:
        raise TypeError(f"make_model_dir({model_type!r}): unknown options {sorted(unknown)}")
    prefix = bool(options.get("prefix", False))
    sizes = {k: v for k, v in options.items() if k not in _MAKE_OPTIONS}
    cfg = make_config(model_type, prefix=prefix, **sizes)
    if "hidden_act" in options:
        cfg["activation_function" if model_type == "gpt2" else "hidden_act"] = options["hidden_act"]
    base, heads = _random_weights(model_type, cfg, seed, float(options.get("std", 0.2)))
    if options.get("legacy_buffers", False):
        base.update(_legacy_buffers(model_type, cfg, options.get("legacy_bias_dtype", "U8")))
    weights = dict(base)
    if prefix:
        weights = {BASE_PREFIX[model_type] + k: t for k, t in base.items()}
        weights.update(heads)
    inputs = make_inputs(model_type, cfg["vocab_size"], int(options.get("seq_len", 11)), seed)
    reference = to_saved(forward(cfg, weights, inputs["input_ids"], inputs.get("token_type_ids")))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        f.write(config_json_text(cfg))
    save_safetensors(os.path.join(out_dir, "model.safetensors"), weights, {"format": "pt"})
    save_safetensors(os.path.join(out_dir, "reference.safetensors"), reference,
                     {"format": "pt", "model_type": model_type, "seed": str(seed),
                      "computed_in": "float64"})
    return {"config": cfg, "weights": weights, "reference": reference}


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def _parse_ints(text, what):
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"{what} must be integers separated by spaces, got {text!r}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hf_reference.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make", help="write a tiny random HF-layout model + reference outputs")
    mk.add_argument("--model-type", required=True, choices=MODEL_TYPES)
    mk.add_argument("--out", required=True, help="output directory")
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--prefix", action="store_true",
                    help="save as *ForPreTraining / GPT2LMHeadModel (bert./albert./transformer.)")
    mk.add_argument("--legacy-buffers", action="store_true",
                    help="also write old non-parameter buffers (position_ids, attn.bias, masked_bias)")
    mk.add_argument("--legacy-bias-dtype", default="U8", choices=("U8", "BOOL", "F32"))
    mk.add_argument("--seq-len", type=int, default=11)
    fw = sub.add_parser("forward", help="float64 forward of an HF-layout directory")
    fw.add_argument("--model", required=True, help="directory with config.json + model.safetensors")
    fw.add_argument("--ids", required=True, help='token ids, e.g. "2 7 8 3"')
    fw.add_argument("--token-type-ids", help='e.g. "0 0 1 1" (default: zeros for BERT/ALBERT)')
    fw.add_argument("--attention-mask", help='e.g. "1 1 1 0" (default: all ones)')
    fw.add_argument("--out", required=True, help="output .safetensors file")
    args = parser.parse_args(argv)
    try:
        if args.command == "make":
            r = make_model_dir(args.model_type, args.out, seed=args.seed, prefix=args.prefix,
                               legacy_buffers=args.legacy_buffers,
                               legacy_bias_dtype=args.legacy_bias_dtype, seq_len=args.seq_len)
            print(f"wrote {args.out}: {len(r['weights'])} tensors, reference with "
                  f"{', '.join(r['reference'])}")
        else:
            ids = _parse_ints(args.ids, "--ids")
            tt = _parse_ints(args.token_type_ids, "--token-type-ids") if args.token_type_ids else None
            am = _parse_ints(args.attention_mask, "--attention-mask") if args.attention_mask else None
            out = to_saved(forward_model_dir(args.model, [ids], None if tt is None else [tt],
                                             None if am is None else [am]))
            save_safetensors(args.out, out, {"format": "pt", "computed_in": "float64"})
            print(f"wrote {args.out}: {', '.join(out)}")
    except (ValueError, TypeError, OSError, KeyError) as e:
        print(f"hf_reference.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
