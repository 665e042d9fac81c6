#!/usr/bin/python3
"""attnkit encode / convert against the independent python3-torch reference (hf_reference.py):
tiny random BERT, ALBERT and GPT-2 directories in Hugging Face layout (with and without the task
prefix, with legacy buffers, F16 storage) must load, run within 1e-4 of the float64 reference,
re-save bit-identically and survive attnkit-format round trips; bad directories must fail with one
clear line."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402
import runner  # noqa: E402

BUILD_DIR = "build"
TOLERANCE = 1e-4


def attnkit(*argv):
    """-> (returncode, stdout, stderr) of build/attnkit with 1 thread."""
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def ids_text(t):
    return " ".join(str(x) for x in t[0].tolist())


class HfInterop(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def make(self, model_type, name=None, **options):
        d = os.path.join(self.dir, name or model_type)
        made = hf.make_model_dir(model_type, d, seed=3, **options)
        return d, made

    def encode(self, model_dir, ref, extra=()):
        out = os.path.join(self.dir, "encoded.safetensors")
        argv = ["encode", "--model", model_dir, "--ids", ids_text(ref["input_ids"]), "--output", out]
        if "token_type_ids" in ref:
            argv += ["--token-type-ids", ids_text(ref["token_type_ids"])]
        argv += list(extra)
        rc, _, err = attnkit(*argv)
        self.assertEqual(rc, 0, err)
        return hf.load_safetensors(out)

    def assert_matches(self, got, ref, what):
        compared = []
        for name, expected in ref.items():
            if name in ("input_ids", "token_type_ids", "attention_mask"):
                continue
            self.assertIn(name, got, f"{what}: attnkit did not write {name}")
            self.assertEqual(list(got[name].shape), list(expected.shape), f"{what}: {name}")
            err = (got[name].double() - expected.double()).abs().max().item()
            self.assertLessEqual(err, TOLERANCE, f"{what}: {name} differs by {err}")
            compared.append(name)
        self.assertTrue(any(n.startswith("hidden_states.") for n in compared))
        return compared

    def test_encode_matches_reference(self):
        for model_type in hf.MODEL_TYPES:
            for options in ({}, {"prefix": True}, {"legacy_buffers": True},
                            {"prefix": True, "legacy_buffers": True, "legacy_bias_dtype": "BOOL"}):
                with self.subTest(model_type=model_type, **options):
                    d, made = self.make(model_type, f"{model_type}-{len(options)}-{options.get('prefix')}",
                                        **options)
                    got = self.encode(d, made["reference"])
                    compared = self.assert_matches(got, made["reference"], f"{model_type} {options}")
                    main = "logits" if model_type == "gpt2" else "last_hidden_state"
                    self.assertIn(main, compared)
                    if options.get("prefix") and model_type != "gpt2":
                        self.assertIn("mlm_logits", compared)

    def test_attention_mask_and_printed_checksum(self):
        d, made = self.make("bert")
        ids = made["reference"]["input_ids"]
        mask = torch.ones_like(ids)
        mask[0, -3:] = 0
        expected = hf.to_saved(hf.forward_model_dir(d, ids, made["reference"]["token_type_ids"], mask))
        got = self.encode(d, made["reference"], ["--attention-mask", ids_text(mask)])
        real = int(mask.sum())
        err = (got["last_hidden_state"][:, :real] - expected["last_hidden_state"][:, :real]).abs().max()
        self.assertLessEqual(err.item(), TOLERANCE)
        rc, out, err = attnkit("encode", "--model", d, "--ids", ids_text(ids))
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"last_hidden_state \[1, 11, 32\] sum -?\d+\.\d+")

    def test_resave_is_bit_identical(self):
        for model_type in hf.MODEL_TYPES:
            for prefix in (False, True):
                with self.subTest(model_type=model_type, prefix=prefix):
                    d, _ = self.make(model_type, f"{model_type}-{prefix}", prefix=prefix)
                    out = os.path.join(self.dir, f"resaved-{model_type}-{prefix}")
                    rc, _, err = attnkit("convert", "--from", d, "--to", out, "--format", "huggingface")
                    self.assertEqual(rc, 0, err)
                    with open(os.path.join(d, "model.safetensors"), "rb") as a, \
                            open(os.path.join(out, "model.safetensors"), "rb") as b:
                        self.assertEqual(a.read(), b.read(), "model.safetensors bytes differ")
                    with open(os.path.join(d, "config.json")) as a, open(os.path.join(out, "config.json")) as b:
                        self.assertEqual(json.load(a), json.load(b))

    def test_legacy_buffers_are_dropped_and_tensors_kept(self):
        d, made = self.make("gpt2", prefix=True, legacy_buffers=True)
        out = os.path.join(self.dir, "resaved")
        rc, _, err = attnkit("convert", "--from", d, "--to", out, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        saved = hf.load_safetensors(os.path.join(out, "model.safetensors"))
        expected = {k: v for k, v in made["weights"].items() if not re.search(r"\.attn\.(bias|masked_bias)$", k)}
        self.assertEqual(sorted(saved), sorted(expected))
        for k, v in expected.items():
            self.assertTrue(torch.equal(saved[k], v), k)

    def test_tied_copies_and_f16_round_trip(self):
        d, made = self.make("bert", prefix=True)
        weights = {k: (v.half() if v.is_floating_point() else v) for k, v in made["weights"].items()}
        weights["cls.predictions.decoder.weight"] = weights["bert.embeddings.word_embeddings.weight"].clone()
        weights["cls.predictions.decoder.bias"] = weights["cls.predictions.bias"].clone()
        hf.save_safetensors(os.path.join(d, "model.safetensors"), weights, {"format": "pt"})
        out = os.path.join(self.dir, "resaved")
        rc, _, err = attnkit("convert", "--from", d, "--to", out, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(d, "model.safetensors"), "rb") as a, \
                open(os.path.join(out, "model.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        # Runs as float32 from F16 weights: matches the reference on the same (rounded) weights.
        ref = hf.to_saved(hf.forward_model_dir(d, made["reference"]["input_ids"],
                                               made["reference"]["token_type_ids"]))
        self.assert_matches(self.encode(d, made["reference"]), ref, "f16")

    def test_attnkit_format_round_trip(self):
        for model_type in hf.MODEL_TYPES:
            with self.subTest(model_type=model_type):
                d, made = self.make(model_type, prefix=True)
                ak = os.path.join(self.dir, f"{model_type}-attnkit")
                back = os.path.join(self.dir, f"{model_type}-back")
                self.assertEqual(attnkit("convert", "--from", d, "--to", ak)[0], 0)
                with open(os.path.join(ak, "config.json")) as f:
                    self.assertEqual(json.load(f)["attnkit_format"], 1)
                self.assert_matches(self.encode(ak, made["reference"]), made["reference"], "attnkit")
                rc, _, err = attnkit("convert", "--from", ak, "--to", back, "--format", "huggingface")
                self.assertEqual(rc, 0, err)
                saved = hf.load_safetensors(os.path.join(back, "model.safetensors"))
                self.assertEqual(sorted(saved), sorted(made["weights"]))
                for k, v in made["weights"].items():
                    self.assertTrue(torch.equal(saved[k], v), k)
                # The regenerated config.json is one the reference reads to the same outputs.
                self.assert_matches(hf.to_saved(hf.forward_model_dir(back, made["reference"]["input_ids"],
                                                                     made["reference"].get("token_type_ids"))),
                                    made["reference"], "regenerated config")

    def expect_error(self, model_dir, pattern, ids="2 5 6 3"):
        rc, out, err = attnkit("encode", "--model", model_dir, "--ids", ids)
        self.assertNotEqual(rc, 0)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertRegex(lines[0], pattern)

    def rewrite(self, d, change):
        path = os.path.join(d, "model.safetensors")
        tensors = hf.load_safetensors(path)
        change(tensors)
        hf.save_safetensors(path, tensors, {"format": "pt"})

    def test_bad_directories_are_clear_errors(self):
        d, _ = self.make("bert")
        cfg_path = os.path.join(d, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, model_type="xlm-roberta", architectures=["XLMRobertaModel"]), f)
        self.expect_error(d, r"model_type 'xlm-roberta' is not supported \(attnkit reads .*roberta, .*phi3\)")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)

        self.rewrite(d, lambda t: t.pop("encoder.layer.1.output.dense.bias"))
        self.expect_error(d, r"missing tensors: encoder\.layer\.1\.output\.dense\.bias")

        d, _ = self.make("gpt2")
        self.rewrite(d, lambda t: t.update({"h.0.attn.rotary.weight": torch.zeros(2)}))
        self.expect_error(d, r"unknown tensors .*h\.0\.attn\.rotary\.weight")

        d, _ = self.make("albert")
        self.rewrite(d, lambda t: t.update({"encoder.embedding_hidden_mapping_in.weight": torch.zeros(32, 15)}))
        self.expect_error(d, r"encoder\.embedding_hidden_mapping_in\.weight: expected \[32, 16\], got \[32, 15\]")

        d, _ = self.make("bert", "truncated")
        path = os.path.join(d, "model.safetensors")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) - 100])
        self.expect_error(d, r"model\.safetensors: ")

        self.expect_error(os.path.join(self.dir, "nowhere"), r"no such file or directory")
        d, _ = self.make("bert", "ids")
        self.expect_error(d, r"--ids: ids must lie in \[0, 99\)", ids="2 500 3")
        self.expect_error(d, r"--ids: 'x' is not an integer", ids="2 x 3")


def load_encoder_layer(layer, weights):
    """Copies {parameter path in torch.nn.TransformerEncoderLayer: tensor} into `layer`."""
    params = dict(layer.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    layer.eval()
    return layer


class BlockPeers(unittest.TestCase):
    """One-layer HF-layout models let attnkit's block be compared with
    torch.nn.TransformerEncoderLayer on the same weights: BERT's post-LN block (exact gelu,
    eps 1e-12) and GPT-2's pre-LN block (tanh gelu, causal mask, eps 1e-5). The block's input is
    attnkit's own embedding output (hidden_states.0)."""

    def test_post_ln_block_equals_transformer_encoder_layer(self):
        with tempfile.TemporaryDirectory() as d:
            made = hf.make_model_dir("bert", d, seed=5, num_hidden_layers=1)
            p = {k[len("encoder.layer.0."):]: v for k, v in made["weights"].items()
                 if k.startswith("encoder.layer.0.")}
            got = self._encode(d, made["reference"])
            qkv = ("query", "key", "value")
            layer = load_encoder_layer(
                torch.nn.TransformerEncoderLayer(32, 4, 37, dropout=0.0, activation="gelu",
                                                 layer_norm_eps=1e-12, batch_first=True).double(),
                {"self_attn.in_proj_weight": torch.cat([p[f"attention.self.{r}.weight"] for r in qkv]),
                 "self_attn.in_proj_bias": torch.cat([p[f"attention.self.{r}.bias"] for r in qkv]),
                 "self_attn.out_proj.weight": p["attention.output.dense.weight"],
                 "self_attn.out_proj.bias": p["attention.output.dense.bias"],
                 "norm1.weight": p["attention.output.LayerNorm.weight"],
                 "norm1.bias": p["attention.output.LayerNorm.bias"],
                 "linear1.weight": p["intermediate.dense.weight"], "linear1.bias": p["intermediate.dense.bias"],
                 "linear2.weight": p["output.dense.weight"], "linear2.bias": p["output.dense.bias"],
                 "norm2.weight": p["output.LayerNorm.weight"], "norm2.bias": p["output.LayerNorm.bias"]})
            with torch.no_grad():
                expected = layer(got["hidden_states.0"].double())
            err = (got["hidden_states.1"].double() - expected).abs().max().item()
            self.assertLessEqual(err, 1e-5)

    def test_pre_ln_causal_block_equals_transformer_encoder_layer(self):
        with tempfile.TemporaryDirectory() as d:
            made = hf.make_model_dir("gpt2", d, seed=6, n_layer=1)
            p = {k[len("h.0."):]: v for k, v in made["weights"].items() if k.startswith("h.0.")}
            got = self._encode(d, made["reference"])
            h = 32
            layer = load_encoder_layer(
                torch.nn.TransformerEncoderLayer(
                    h, 4, 4 * h, dropout=0.0, layer_norm_eps=1e-5, batch_first=True, norm_first=True,
                    activation=lambda x: torch.nn.functional.gelu(x, approximate="tanh")).double(),
                # Conv1D weights are [in, out]
                {"self_attn.in_proj_weight": p["attn.c_attn.weight"].t(),
                 "self_attn.in_proj_bias": p["attn.c_attn.bias"],
                 "self_attn.out_proj.weight": p["attn.c_proj.weight"].t(),
                 "self_attn.out_proj.bias": p["attn.c_proj.bias"],
                 "norm1.weight": p["ln_1.weight"], "norm1.bias": p["ln_1.bias"],
                 "linear1.weight": p["mlp.c_fc.weight"].t(), "linear1.bias": p["mlp.c_fc.bias"],
                 "linear2.weight": p["mlp.c_proj.weight"].t(), "linear2.bias": p["mlp.c_proj.bias"],
                 "norm2.weight": p["ln_2.weight"], "norm2.bias": p["ln_2.bias"]})
            with torch.no_grad():
                n = got["hidden_states.0"].shape[1]
                causal = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)
                block = layer(got["hidden_states.0"].double(), src_mask=causal)
                # GPT-2's last hidden state is after ln_f: apply it to the peer's output too.
                expected = torch.nn.functional.layer_norm(block, (h,), made["weights"]["ln_f.weight"].double(),
                                                          made["weights"]["ln_f.bias"].double(), 1e-5)
            err = (got["hidden_states.1"].double() - expected).abs().max().item()
            self.assertLessEqual(err, 1e-5)

    def _encode(self, d, ref):
        out = os.path.join(d, "encoded.safetensors")
        argv = ["encode", "--model", d, "--ids", ids_text(ref["input_ids"]), "--output", out]
        if "token_type_ids" in ref:
            argv += ["--token-type-ids", ids_text(ref["token_type_ids"])]
        rc, _, err = attnkit(*argv)
        self.assertEqual(rc, 0, err)
        return hf.load_safetensors(out)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
