#!/usr/bin/python3
"""Self-test of tests/python/hf_reference.py (python3-torch 1.13 + numpy only).

Run: /usr/bin/python3 tests/python/test_hf_reference.py [--build-dir BUILD]   (--build-dir ignored)

Checks: the safetensors writer/reader (byte-exact against the reference crate's own test vectors,
round trip of every dtype, header padding and ordering, rejection of broken files); `make` +
`forward` reproduce reference.safetensors for BERT / ALBERT / GPT-2 with and without prefixes and
legacy buffers; the whole BERT / ALBERT / GPT-2 forwards equal stacks of torch.nn modules
(nn.TransformerEncoderLayer post-LN for BERT/ALBERT, pre-LN + causal mask for GPT-2) with the same
weights copied in; GPT-2 is causal; ALBERT's shared layer still changes the hidden states.
"""
import contextlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # write nothing into the source tree
sys.path.insert(0, HERE)
import hf_reference as hf  # noqa: E402

SCRIPT = os.path.join(HERE, "hf_reference.py")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def header_of(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return n, data[8:8 + n], data


class Safetensors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name="t.safetensors"):
        return os.path.join(self.dir, name)

    def test_byte_exact_against_reference_crate_vectors(self):
        # From the safetensors crate's tensor.rs unit tests.
        data = torch.arange(6, dtype=torch.float32)
        hf.save_safetensors(self.path(), {"attn.0": data.view(1, 2, 3)})
        expect = (struct.pack("<Q", 64) +
                  b'{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}' +
                  data.numpy().tobytes())
        self.assertEqual(read_bytes(self.path()), expect)
        # Forced alignment: a 65-byte JSON is padded with 7 spaces.
        hf.save_safetensors(self.path(), {"attn0": data.view(1, 1, 2, 3)})
        expect = (struct.pack("<Q", 72) +
                  b'{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}' + b" " * 7 +
                  data.numpy().tobytes())
        self.assertEqual(read_bytes(self.path()), expect)
        hf.save_safetensors(self.path(), {})
        self.assertEqual(read_bytes(self.path()), bytes([8, 0, 0, 0, 0, 0, 0, 0]) + b"{}" + b" " * 6)
        hf.save_safetensors(self.path(), {}, {"framework": "pt"})
        self.assertEqual(read_bytes(self.path()),
                         struct.pack("<Q", 40) + b'{"__metadata__":{"framework":"pt"}}' + b" " * 5)

    def test_round_trip_all_dtypes(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(3, 5, generator=g, dtype=torch.float64)
        tensors = {
            "f64": x.clone(), "f32": x.float(), "f16": x.half(), "bf16": x.bfloat16(),
            "i64": torch.randint(-2**40, 2**40, (4,), generator=g),
            "i32": torch.randint(-2**31, 2**31 - 1, (2, 3), generator=g, dtype=torch.int32),
            "i16": torch.randint(-2**15, 2**15 - 1, (7,), generator=g, dtype=torch.int16),
            "i8": torch.randint(-128, 127, (3,), generator=g, dtype=torch.int8),
            "u8": torch.randint(0, 255, (1, 1, 5), generator=g, dtype=torch.uint8),
            "bool": torch.rand(2, 2, generator=g) > 0.5,
            "scalar": torch.tensor(-1e4), "empty": torch.zeros(0, 3),
            "noncontig": x.float().t(), "b.f32": x.float()[:1], "a.f32": x.float()[1:],
        }
        for odd in range(1, 9):  # header lengths with every remainder mod 8
            meta = {"format": "pt", "note": "x" * odd}
            hf.save_safetensors(self.path(), tensors, meta)
            n, header, data = header_of(self.path())
            self.assertEqual(n % 8, 0)
            self.assertEqual(header, header.rstrip(b" ") + b" " * (n - len(header.rstrip(b" "))))
            self.assertTrue(header.startswith(b'{"__metadata__":'))
            got, got_meta = hf.load_safetensors_with_metadata(self.path())
            self.assertEqual(got_meta, meta)
            self.assertEqual(set(got), set(tensors))
            for k, v in tensors.items():
                self.assertEqual(got[k].dtype, v.dtype, k)
                self.assertEqual(list(got[k].shape), list(v.shape), k)
                self.assertTrue(torch.equal(got[k], v), k)
            # Order: dtype alignment desc (crate enum order), then name; contiguous offsets.
            entries = json.loads(header)
            entries.pop("__metadata__")
            names = list(entries)
            order = hf._RUST_DTYPE_ORDER
            self.assertEqual(names, sorted(names, key=lambda k: (-order.index(entries[k]["dtype"]), k)))
            self.assertEqual(names[:2], ["i64", "f64"])
            self.assertEqual([entries[k]["dtype"] for k in names[-3:]], ["I8", "U8", "BOOL"])
            end = 0
            for k in names:
                self.assertEqual(entries[k]["data_offsets"][0], end)
                end = entries[k]["data_offsets"][1]
            self.assertEqual(8 + n + end, len(data))
            self.assertEqual(entries["scalar"]["shape"], [])
            self.assertEqual(list(got), names)  # load order = file order

    def test_reader_rejects_broken_files(self):
        hf.save_safetensors(self.path(), {"a": torch.ones(4), "b": torch.ones(2)})
        _, header, data = header_of(self.path())
        bad = self.path("bad.safetensors")
        with open(bad, "wb") as f:
            f.write(data[:-1])  # truncated buffer
        self.assertRaises(ValueError, hf.load_safetensors, bad)
        h = json.loads(header)
        h["b"]["data_offsets"] = [20, 28]  # gap
        raw = json.dumps(h).encode()
        raw += b" " * ((8 - len(raw) % 8) % 8)
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + data[8 + len(header):])
        self.assertRaises(ValueError, hf.load_safetensors, bad)
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", 1000) + b"{}")
        self.assertRaises(ValueError, hf.load_safetensors, bad)
        self.assertRaises(TypeError, hf.save_safetensors, bad, {"c": torch.zeros(2, dtype=torch.complex64)})


BERT_LAYER = ["attention.self.query", "attention.self.key", "attention.self.value",
              "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
              "output.dense", "output.LayerNorm"]
ALBERT_LAYER = ["attention.query", "attention.key", "attention.value", "attention.dense",
                "attention.LayerNorm", "ffn", "ffn_output", "full_layer_layer_norm"]
GPT2_LAYER = ["ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"]


def expected_names(model_type, layers):
    wb = lambda n: [n + ".weight", n + ".bias"]  # noqa: E731
    if model_type == "gpt2":
        names = ["wte.weight", "wpe.weight"] + wb("ln_f")
        for i in range(layers):
            for n in GPT2_LAYER:
                names += wb(f"h.{i}.{n}")
        return set(names)
    names = ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
             "embeddings.token_type_embeddings.weight"] + wb("embeddings.LayerNorm")
    if model_type == "bert":
        for i in range(layers):
            for n in BERT_LAYER:
                names += wb(f"encoder.layer.{i}.{n}")
        names += wb("pooler.dense")
    else:
        names += wb("encoder.embedding_hidden_mapping_in") + wb("pooler")
        for n in ALBERT_LAYER:
            names += wb(f"encoder.albert_layer_groups.0.albert_layers.0.{n}")
    return set(names)


def cli(*argv):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = hf.main(list(argv))
    return rc, err.getvalue()


class MakeAndForward(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs, cls.made = {}, {}
        for mt in hf.MODEL_TYPES:
            for variant, opts in (("plain", {}), ("prefix", {"prefix": True, "legacy_buffers": True})):
                d = os.path.join(cls.tmp.name, f"{mt}-{variant}")
                cls.made[mt, variant] = hf.make_model_dir(mt, d, seed=3, **opts)
                cls.dirs[mt, variant] = d

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assertClose(self, a, b, atol=1e-5, rtol=1e-5, what=""):
        self.assertEqual(list(a.shape), list(b.shape), what)
        err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        self.assertTrue(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol), f"{what}: max err {err}")

    def test_config_json(self):
        for mt in hf.MODEL_TYPES:
            with open(os.path.join(self.dirs[mt, "plain"], "config.json")) as f:
                text = f.read()
            cfg = json.loads(text)
            self.assertEqual(text, json.dumps(cfg, indent=2, sort_keys=True) + "\n")
            self.assertEqual(cfg["model_type"], mt)
            self.assertEqual(cfg["torch_dtype"], "float32")
            self.assertIn("transformers_version", cfg)
            if mt == "gpt2":
                self.assertEqual(cfg["architectures"], ["GPT2Model"])
                for k, v in {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "n_ctx": 64,
                             "n_inner": None, "activation_function": "gelu_new",
                             "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
                             "bos_token_id": 98, "eos_token_id": 98}.items():
                    self.assertEqual(cfg[k], v, k)
                for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "vocab_size", "initializer_range"):
                    self.assertIn(k, cfg)
            else:
                act = "gelu" if mt == "bert" else "gelu_new"
                for k, v in {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 37,
                             "max_position_embeddings": 64, "type_vocab_size": 2, "vocab_size": 99,
                             "hidden_act": act, "layer_norm_eps": 1e-12, "pad_token_id": 0,
                             "position_embedding_type": "absolute"}.items():
                    self.assertEqual(cfg[k], v, k)
                for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range",
                          "num_hidden_layers", "architectures"):
                    self.assertIn(k, cfg)
                if mt == "albert":
                    self.assertEqual((cfg["embedding_size"], cfg["num_hidden_groups"]), (16, 1))
            self.assertIn('"layer_norm_eps' + ('ilon": 1e-05' if mt == "gpt2" else '": 1e-12'), text)

    def test_tensor_names(self):
        for mt in hf.MODEL_TYPES:
            layers = self.made[mt, "plain"]["config"].get("n_layer") or \
                self.made[mt, "plain"]["config"]["num_hidden_layers"]
            plain = set(hf.load_safetensors(os.path.join(self.dirs[mt, "plain"], "model.safetensors")))
            self.assertEqual(plain, expected_names(mt, layers), mt)
            pre, md = hf.load_safetensors_with_metadata(os.path.join(self.dirs[mt, "prefix"], "model.safetensors"))
            self.assertEqual(md, {"format": "pt"})
            p = hf.BASE_PREFIX[mt]
            self.assertTrue({p + n for n in plain} <= set(pre), mt)
            extra = set(pre) - {p + n for n in plain}
            if mt == "bert":
                self.assertEqual(extra, {"bert.embeddings.position_ids", "cls.predictions.bias",
                                         "cls.predictions.transform.dense.weight",
                                         "cls.predictions.transform.dense.bias",
                                         "cls.predictions.transform.LayerNorm.weight",
                                         "cls.predictions.transform.LayerNorm.bias",
                                         "cls.seq_relationship.weight", "cls.seq_relationship.bias"})
                self.assertEqual(pre["bert.embeddings.position_ids"].dtype, torch.int64)
                self.assertEqual(pre["bert.embeddings.position_ids"].tolist(), [list(range(64))])
            elif mt == "albert":
                self.assertEqual(extra, {"albert.embeddings.position_ids", "predictions.bias",
                                         "predictions.dense.weight", "predictions.dense.bias",
                                         "predictions.LayerNorm.weight", "predictions.LayerNorm.bias",
                                         "sop_classifier.classifier.weight", "sop_classifier.classifier.bias"})
            else:
                self.assertEqual(extra, {f"transformer.h.{i}.attn.{b}" for i in range(layers)
                                         for b in ("bias", "masked_bias")})
                bias = pre["transformer.h.0.attn.bias"]
                self.assertEqual((bias.dtype, list(bias.shape)), (torch.uint8, [1, 1, 64, 64]))
                self.assertTrue(torch.equal(bias[0, 0], torch.ones(64, 64, dtype=torch.uint8).tril()))
                self.assertEqual(pre["transformer.h.0.attn.masked_bias"].item(), -1e4)
        w = self.made["gpt2", "plain"]["weights"]
        self.assertEqual(list(w["h.0.attn.c_attn.weight"].shape), [32, 96])
        self.assertEqual(list(w["h.0.mlp.c_fc.weight"].shape), [32, 128])
        self.assertEqual(list(w["h.0.mlp.c_proj.weight"].shape), [128, 32])
        a = self.made["albert", "plain"]["weights"]
        self.assertEqual(list(a["encoder.embedding_hidden_mapping_in.weight"].shape), [32, 16])
        self.assertEqual(list(a["embeddings.word_embeddings.weight"].shape), [99, 16])
        ln = self.made["bert", "plain"]["weights"]["encoder.layer.0.output.LayerNorm.weight"]
        self.assertGreater((ln - 1).abs().max().item(), 0.05)  # random, not 1

    def test_reference_contents(self):
        for mt in hf.MODEL_TYPES:
            ref = hf.load_safetensors(os.path.join(self.dirs[mt, "plain"], "reference.safetensors"))
            cfg = self.made[mt, "plain"]["config"]
            L = cfg.get("n_layer") or cfg["num_hidden_layers"]
            ids = ref["input_ids"]
            self.assertEqual((ids.dtype, ids.shape[0]), (torch.int64, 1))
            self.assertTrue(9 <= ids.shape[1] <= 13 and 0 <= ids.min() and ids.max() < 99)
            want = {"input_ids", "last_hidden_state"} | {f"hidden_states.{k}" for k in range(L + 1)}
            if mt == "gpt2":
                want |= {"logits"}
                self.assertEqual(list(ref["logits"].shape), [1, ids.shape[1], 99])
            else:
                want |= {"token_type_ids", "pooler_output"}
                self.assertEqual(ids[0, 0].item(), 2)
                self.assertEqual(ref["token_type_ids"].dtype, torch.int64)
                self.assertTrue(0 < ref["token_type_ids"].sum() < ids.shape[1])
                self.assertEqual(list(ref["pooler_output"].shape), [1, 32])
            self.assertEqual(set(ref), want, mt)
            self.assertTrue(torch.equal(ref["last_hidden_state"], ref[f"hidden_states.{L}"]))
            self.assertGreater(ref["last_hidden_state"].std().item(), 0.3)
            for k, v in ref.items():
                if k not in ("input_ids", "token_type_ids"):
                    self.assertEqual(v.dtype, torch.float32, k)
                    self.assertEqual(list(v.shape[:2]), [1, ids.shape[1]] if v.dim() > 2 else list(v.shape[:2]))
        pre = hf.load_safetensors(os.path.join(self.dirs["bert", "prefix"], "reference.safetensors"))
        self.assertEqual(list(pre["mlm_logits"].shape), [1, 11, 99])
        self.assertEqual(list(pre["seq_relationship_logits"].shape), [1, 2])
        pre = hf.load_safetensors(os.path.join(self.dirs["albert", "prefix"], "reference.safetensors"))
        self.assertEqual(list(pre["mlm_logits"].shape), [1, 11, 99])

    def test_forward_reproduces_reference(self):
        for (mt, variant), d in self.dirs.items():
            ref = hf.load_safetensors(os.path.join(d, "reference.safetensors"))
            out = os.path.join(d, "forward.safetensors")
            argv = ["forward", "--model", d, "--ids", " ".join(map(str, ref["input_ids"][0].tolist())),
                    "--out", out]
            if "token_type_ids" in ref:
                argv += ["--token-type-ids", " ".join(map(str, ref["token_type_ids"][0].tolist()))]
            rc, err = cli(*argv)
            self.assertEqual(rc, 0, err)
            got = hf.load_safetensors(out)
            self.assertEqual(set(got), set(ref), (mt, variant))
            for k in ref:
                self.assertClose(got[k], ref[k], atol=1e-6, rtol=1e-6, what=f"{mt}/{variant}/{k}")
            # The base model is the same with and without prefix / legacy buffers.
            if variant == "prefix":
                plain = hf.load_safetensors(os.path.join(self.dirs[mt, "plain"], "reference.safetensors"))
                for k in plain:
                    self.assertTrue(torch.equal(plain[k], ref[k]), f"{mt}/{k}")

    def test_cli_subprocess(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o.safetensors")
            r = subprocess.run([sys.executable, SCRIPT, "forward", "--model", self.dirs["gpt2", "prefix"],
                                "--ids", "1 2 3 97", "--out", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = hf.load_safetensors(out)
            want = hf.forward_model_dir(self.dirs["gpt2", "plain"], [[1, 2, 3, 97]])
            self.assertClose(got["logits"], want["logits"], atol=1e-6, rtol=1e-6, what="logits")

    def test_cli_make_and_errors(self):
        with tempfile.TemporaryDirectory() as d:
            rc, err = cli("make", "--model-type", "gpt2", "--out", d, "--seed", "3", "--legacy-buffers",
                          "--legacy-bias-dtype", "BOOL")
            self.assertEqual(rc, 0, err)
            w = hf.load_safetensors(os.path.join(d, "model.safetensors"))
            self.assertEqual(w["h.1.attn.bias"].dtype, torch.bool)
            ref = hf.load_safetensors(os.path.join(d, "reference.safetensors"))
            plain = hf.load_safetensors(os.path.join(self.dirs["gpt2", "plain"], "reference.safetensors"))
            self.assertTrue(torch.equal(ref["logits"], plain["logits"]))
            rc, err = cli("forward", "--model", d, "--ids", "1 2 99", "--out", os.path.join(d, "x"))
            self.assertEqual(rc, 2)
            self.assertIn("input_ids must lie in [0, 99)", err)
            self.assertEqual(err.count("\n"), 1)
            rc, err = cli("forward", "--model", os.path.join(d, "nope"), "--ids", "1", "--out", os.path.join(d, "x"))
            self.assertEqual(rc, 2)
            self.assertIn("config.json", err)

    def test_pytorch_bin_and_gamma_beta_names(self):
        w = self.made["bert", "plain"]["weights"]
        renamed = {("bert." + k).replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
                   for k, v in w.items()}
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(hf.config_json_text(self.made["bert", "plain"]["config"]))
            torch.save(renamed, os.path.join(d, "pytorch_model.bin"))
            ref = self.made["bert", "plain"]["reference"]
            got = hf.forward_model_dir(d, ref["input_ids"], ref["token_type_ids"])
            self.assertClose(got["pooler_output"], ref["pooler_output"], atol=1e-6, rtol=1e-6)

    def test_attention_mask_padding(self):
        # Padding keys masked out: the unpadded positions equal the unpadded sequence's outputs.
        d = self.dirs["bert", "plain"]
        ids = [2, 10, 11, 12, 3]
        short = hf.forward_model_dir(d, [ids])
        padded = hf.forward_model_dir(d, [ids + [0, 0]], attention_mask=[[1] * 5 + [0, 0]])
        self.assertClose(padded["last_hidden_state"][:, :5], short["last_hidden_state"], atol=1e-10, rtol=0)
        # A batch of two (one padded) gives the same rows as two single runs.
        batch = hf.forward_model_dir(d, [ids + [0, 0], [2, 5, 6, 7, 8, 9, 3]],
                                     attention_mask=[[1] * 5 + [0, 0], [1] * 7])
        self.assertClose(batch["last_hidden_state"][:1, :5], short["last_hidden_state"], atol=1e-10, rtol=0)
        other = hf.forward_model_dir(d, [[2, 5, 6, 7, 8, 9, 3]])
        self.assertClose(batch["pooler_output"][1:], other["pooler_output"], atol=1e-10, rtol=0)


# ---------------------------------------------------------------------------------------------
# Independent cross-checks with torch.nn modules
# ---------------------------------------------------------------------------------------------

def tanh_gelu(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def encoder_layer(p, names, num_heads, eps, act, norm_first=False, transpose=False):
    """nn.TransformerEncoderLayer (float64, dropout 0, batch_first) with HF weights copied in.
    names: q, k, v, o, ln1, ffn_in, ffn_out, ln2 (BERT/ALBERT, nn.Linear [out, in]) or, with
    transpose=True, GPT-2 Conv1D names: qkv (fused [in, 3*out]), o, ln1, ffn_in, ffn_out, ln2."""
    hidden = p[names["ln1"] + ".weight"].shape[0]
    w = lambda n: p[n + ".weight"].double()  # noqa: E731
    b = lambda n: p[n + ".bias"].double()  # noqa: E731
    t = (lambda m: m.t()) if transpose else (lambda m: m)
    ffn = t(w(names["ffn_in"])).shape[0]
    layer = torch.nn.TransformerEncoderLayer(hidden, num_heads, dim_feedforward=ffn, dropout=0.0,
                                             activation=act, layer_norm_eps=eps, batch_first=True,
                                             norm_first=norm_first).double().eval()
    with torch.no_grad():
        if transpose:
            layer.self_attn.in_proj_weight.copy_(w(names["qkv"]).t())
            layer.self_attn.in_proj_bias.copy_(b(names["qkv"]))
        else:
            layer.self_attn.in_proj_weight.copy_(torch.cat([w(names[r]) for r in "qkv"]))
            layer.self_attn.in_proj_bias.copy_(torch.cat([b(names[r]) for r in "qkv"]))
        for mod, role in ((layer.self_attn.out_proj, "o"), (layer.linear1, "ffn_in"),
                          (layer.linear2, "ffn_out")):
            mod.weight.copy_(t(w(names[role])))
            mod.bias.copy_(b(names[role]))
        for mod, role in ((layer.norm1, "ln1"), (layer.norm2, "ln2")):
            mod.weight.copy_(w(names[role]))
            mod.bias.copy_(b(names[role]))
    return layer


def ln(x, p, name, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], p[name + ".weight"].double(), p[name + ".bias"].double(), eps)


def lin(x, p, name):
    return torch.nn.functional.linear(x, p[name + ".weight"].double(), p[name + ".bias"].double())


class TorchPeers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, got, want, what, atol=1e-5):
        err = (got.double() - want.double()).abs().max().item()
        self.assertLess(err, atol, f"{what}: max err {err}")

    def test_bert_layer_equals_transformer_encoder_layer(self):
        made = hf.make_model_dir("bert", os.path.join(self.tmp.name, "b"), seed=5)
        p = made["weights"]
        x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        P = {k: v.double() for k, v in p.items()}
        for i in range(2):
            layer = encoder_layer(p, hf.bert_layer_names(f"encoder.layer.{i}."), 4, 1e-12, "gelu")
            with torch.no_grad():
                self.check(hf.bert_layer(P, i, x, 4, 1e-12, "gelu"), layer(x), f"layer {i}")
                mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
                self.check(hf.bert_layer(P, i, x, 4, 1e-12, "gelu", attention_mask=mask)[1, :6],
                           layer(x, src_key_padding_mask=mask == 0)[1, :6], f"layer {i} masked")

    def test_bert_model_equals_torch_stack(self):
        made = hf.make_model_dir("bert", os.path.join(self.tmp.name, "b"), seed=7, prefix=True)
        p = {k[5:] if k.startswith("bert.") else k: v for k, v in made["weights"].items()}
        ref = made["reference"]
        ids, tt = ref["input_ids"], ref["token_type_ids"]
        eps = 1e-12
        with torch.no_grad():
            e = p["embeddings.word_embeddings.weight"].double()[ids] + \
                p["embeddings.position_embeddings.weight"].double()[:ids.shape[1]][None] + \
                p["embeddings.token_type_embeddings.weight"].double()[tt]
            x = ln(e, p, "embeddings.LayerNorm", eps)
            self.check(x, ref["hidden_states.0"], "embeddings")
            for i in range(2):
                x = encoder_layer(p, hf.bert_layer_names(f"encoder.layer.{i}."), 4, eps, "gelu")(x)
                self.check(x, ref[f"hidden_states.{i + 1}"], f"hidden_states.{i + 1}")
            self.check(x, ref["last_hidden_state"], "last_hidden_state")
            pooled = torch.tanh(lin(x[:, 0], p, "pooler.dense"))
            self.check(pooled, ref["pooler_output"], "pooler_output")
            t = ln(torch.nn.functional.gelu(lin(x, p, "cls.predictions.transform.dense")), p,
                   "cls.predictions.transform.LayerNorm", eps)
            mlm = t @ p["embeddings.word_embeddings.weight"].double().t() + p["cls.predictions.bias"].double()
            self.check(mlm, ref["mlm_logits"], "mlm_logits")
            self.check(lin(pooled, p, "cls.seq_relationship"), ref["seq_relationship_logits"], "nsp")

    def test_albert_model_equals_torch_stack(self):
        made = hf.make_model_dir("albert", os.path.join(self.tmp.name, "a"), seed=2, prefix=True)
        p = {k[7:] if k.startswith("albert.") else k: v for k, v in made["weights"].items()}
        ref = made["reference"]
        ids, tt = ref["input_ids"], ref["token_type_ids"]
        eps = 1e-12
        with torch.no_grad():
            e = p["embeddings.word_embeddings.weight"].double()[ids] + \
                p["embeddings.position_embeddings.weight"].double()[:ids.shape[1]][None] + \
                p["embeddings.token_type_embeddings.weight"].double()[tt]
            x = lin(ln(e, p, "embeddings.LayerNorm", eps), p, "encoder.embedding_hidden_mapping_in")
            self.check(x, ref["hidden_states.0"], "hidden_states.0")
            shared = encoder_layer(p, hf.albert_layer_names("encoder.albert_layer_groups.0.albert_layers.0."),
                                   4, eps, tanh_gelu)
            for i in range(3):
                x = shared(x)
                self.check(x, ref[f"hidden_states.{i + 1}"], f"hidden_states.{i + 1}")
            pooled = torch.tanh(lin(x[:, 0], p, "pooler"))
            self.check(pooled, ref["pooler_output"], "pooler_output")
            t = ln(tanh_gelu(lin(x, p, "predictions.dense")), p, "predictions.LayerNorm", eps)
            mlm = t @ p["embeddings.word_embeddings.weight"].double().t() + p["predictions.bias"].double()
            self.check(mlm, ref["mlm_logits"], "mlm_logits")
            self.check(lin(pooled, p, "sop_classifier.classifier"), ref["sop_logits"], "sop")
        # Sanity: one shared layer, yet each application changes the hidden states.
        for k in range(3):
            diff = (ref[f"hidden_states.{k + 1}"] - ref[f"hidden_states.{k}"]).abs().max().item()
            self.assertGreater(diff, 0.1, f"hidden_states.{k + 1} vs {k}")
        self.assertEqual(sum(".albert_layers." in k for k in made["weights"]), 16)

    def test_gpt2_model_equals_torch_stack(self):
        made = hf.make_model_dir("gpt2", os.path.join(self.tmp.name, "g"), seed=4, prefix=True)
        p = {k[12:] if k.startswith("transformer.") else k: v for k, v in made["weights"].items()}
        ref = made["reference"]
        ids = ref["input_ids"]
        n = ids.shape[1]
        eps = 1e-5
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)  # True = not allowed
        with torch.no_grad():
            x = p["wte.weight"].double()[ids] + p["wpe.weight"].double()[:n][None]
            self.check(x, ref["hidden_states.0"], "hidden_states.0")
            for i in range(2):
                if i > 0:
                    self.check(x, ref[f"hidden_states.{i}"], f"hidden_states.{i}")
                names = {"qkv": f"h.{i}.attn.c_attn", "o": f"h.{i}.attn.c_proj", "ln1": f"h.{i}.ln_1",
                         "ffn_in": f"h.{i}.mlp.c_fc", "ffn_out": f"h.{i}.mlp.c_proj", "ln2": f"h.{i}.ln_2"}
                x = encoder_layer(p, names, 4, eps, tanh_gelu, norm_first=True, transpose=True)(x, src_mask=causal)
            x = ln(x, p, "ln_f", eps)
            self.check(x, ref["hidden_states.2"], "hidden_states.2")
            self.check(x, ref["last_hidden_state"], "last_hidden_state")
            self.check(x @ p["wte.weight"].double().t(), ref["logits"], "logits")

    def test_gpt2_is_causal(self):
        made = hf.make_model_dir("gpt2", os.path.join(self.tmp.name, "g"), seed=1, n_layer=3)
        cfg, w = made["config"], made["weights"]
        ids = made["reference"]["input_ids"].clone()
        base = hf.forward(cfg, w, ids)
        for pos in (ids.shape[1] - 1, 4):
            changed = ids.clone()
            changed[0, pos] = (changed[0, pos] + 17) % 99
            out = hf.forward(cfg, w, changed)
            for k in ("logits", "last_hidden_state", "hidden_states.1", "hidden_states.2"):
                self.assertTrue(torch.equal(out[k][:, :pos], base[k][:, :pos]), f"{k} before {pos}")
                self.assertGreater((out[k][:, pos:] - base[k][:, pos:]).abs().max().item(), 1e-3, k)

    def test_activations_and_layer_norm(self):
        x = torch.linspace(-6, 6, 101, dtype=torch.float64)
        self.check(hf.gelu_erf(x), torch.nn.functional.gelu(x), "gelu", 1e-12)
        self.check(hf.gelu_tanh(x), tanh_gelu(x), "gelu_new", 1e-12)
        self.assertAlmostEqual(hf.gelu_tanh(torch.tensor([1.0], dtype=torch.float64)).item(),
                               0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715))), places=14)
        y = torch.randn(3, 7, dtype=torch.float64)
        wgt, bias = torch.randn(7, dtype=torch.float64), torch.randn(7, dtype=torch.float64)
        self.check(hf.layer_norm(y, wgt, bias, 1e-5), torch.nn.functional.layer_norm(y, (7,), wgt, bias, 1e-5),
                   "layer_norm", 1e-12)


if __name__ == "__main__":
    argv = [sys.argv[0]]
    args = iter(sys.argv[1:])
    for a in args:
        if a == "--build-dir":
            next(args, None)
        elif not a.startswith("--build-dir="):
            argv.append(a)
    unittest.main(argv=argv)
