#!/usr/bin/python3
"""The Llama families (issue 42) against Hugging Face transformers, the held-out peer: tiny random
llama (grouped-query attention, linear rope scaling, attention biases), mistral (a sliding window
shorter than the prompt), qwen2 (biases on q/k/v only) and gemma (head_dim != hidden / heads,
1 + w RMSNorm, embeddings x sqrt(hidden), GELU-tanh gated MLP) made and saved by transformers.
attnkit reads each directory and must give the same hidden states and logits (<= 1e-4 relative
to the largest value), the same greedy and beam-4 ids on a left-padded batch of two prompts, and
re-save the directory so that transformers loads it with the same outputs.

The weights are drawn with a larger std than the families' 0.02 (initializer_range 0.2): with
0.02 every logit is near every other and a wrong model can still pick the same ids.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh), which has transformers 4.38.2."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

BUILD_DIR = "build"
TOLERANCE = 1e-4
VOCAB = 97


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=128, initializer_range=0.2,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0)

FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(num_key_value_heads=2, attention_bias=True, rope_theta=1000.0,
                   rope_scaling={"type": "linear", "factor": 2.0}, tie_word_embeddings=False)),
    "llama_tied_mha": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                       dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                dict(num_key_value_heads=1, sliding_window=5, rope_theta=10000.0)),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(num_key_value_heads=2, rope_theta=100000.0, use_sliding_window=False)),
    "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM,
              dict(num_key_value_heads=2, head_dim=16, hidden_act="gelu_pytorch_tanh",
                   hidden_activation="gelu_pytorch_tanh")),
}


def make(directory, name, seed):
    config_class, model_class, extra = FAMILIES[name]
    config = config_class(**{**COMMON, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_class(config).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model


def max_relative(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1.0)).item()


class LlamaFamiliesHf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.models = {}
        for seed, name in enumerate(FAMILIES):
            d = os.path.join(cls.tmp.name, name)
            cls.models[name] = (d, make(d, name, seed + 11))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def encode(self, d, ids):
        out = os.path.join(self.tmp.name, "encoded.safetensors")
        rc, _, err = attnkit("encode", "--model", d, "--ids", " ".join(map(str, ids)), "--output", out)
        self.assertEqual(rc, 0, err)
        return load_file(out)

    def check_forward(self, name, d, model):
        g = torch.Generator().manual_seed(5)
        ids = torch.randint(3, VOCAB, (1, 13), generator=g)
        with torch.no_grad():
            ref = model(ids, output_hidden_states=True)
        got = self.encode(d, ids[0].tolist())
        for k, h in enumerate(ref.hidden_states):
            err = max_relative(got[f"hidden_states.{k}"], h)
            self.assertLessEqual(err, TOLERANCE, f"{name}: hidden_states.{k} differs by {err}")
        err = max_relative(got["logits"], ref.logits)
        self.assertLessEqual(err, TOLERANCE, f"{name}: logits differ by {err}")

    def hf_generate(self, model, prompts, **kwargs):
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 eos_token_id=[-1], pad_token_id=0, output_scores=True,
                                 return_dict_in_generate=True, **kwargs)
        n = kwargs.get("num_return_sequences", 1)
        return [out.sequences[i, width:].tolist() for i in range(len(prompts) * n)]

    def attnkit_generate(self, d, prompts, *args):
        argv = ["generate", "--model", d, "--json", "--no-eos"]
        for p in prompts:
            argv += ["--prompt-ids", " ".join(map(str, p))]
        rc, out, err = attnkit(*argv, *args)
        self.assertEqual(rc, 0, err)
        return [s["ids"] for r in json.loads(out)["results"] for s in r["sequences"]]

    def check_generate(self, name, d, model):
        prompts = [[5, 17, 33, 9, 41, 60, 7, 12, 3], [44, 8, 91]]
        expected = self.hf_generate(model, prompts, max_new_tokens=20)
        got = self.attnkit_generate(d, prompts, "--max-new-tokens", "20")
        self.assertEqual(got, expected, f"{name}: greedy ids")
        expected = self.hf_generate(model, prompts, max_new_tokens=12, num_beams=4,
                                    num_return_sequences=2)
        got = self.attnkit_generate(d, prompts, "--max-new-tokens", "12", "--strategy", "beam",
                                    "--beams", "4", "--num-return-sequences", "2")
        self.assertEqual(got, expected, f"{name}: beam-4 ids")

    def test_families_match_transformers(self):
        for name, (d, model) in self.models.items():
            with self.subTest(family=name):
                self.check_forward(name, d, model)
                self.check_generate(name, d, model)

    def test_resaved_directory_loads_in_transformers(self):
        for name, (d, model) in self.models.items():
            with self.subTest(family=name):
                out = os.path.join(self.tmp.name, name + "-resaved")
                rc, _, err = attnkit("convert", "--from", d, "--to", out, "--format", "huggingface")
                self.assertEqual(rc, 0, err)
                self.assertEqual(load_file(os.path.join(out, "model.safetensors")).keys(),
                                 load_file(os.path.join(d, "model.safetensors")).keys())
                again = type(model).from_pretrained(out, attn_implementation="eager").eval()
                ids = torch.tensor([[4, 9, 16, 25, 36, 49, 64, 81]])
                with torch.no_grad():
                    self.assertTrue(torch.equal(again(ids).logits, model(ids).logits), name)
                # attnkit's own format and back.
                ak = os.path.join(self.tmp.name, name + "-attnkit")
                self.assertEqual(attnkit("convert", "--from", d, "--to", ak)[0], 0)
                got = self.encode(ak, ids[0].tolist())
                with torch.no_grad():
                    err = max_relative(got["logits"], model(ids).logits)
                self.assertLessEqual(err, TOLERANCE, f"{name}: attnkit format: logits differ by {err}")

    def test_bad_configs_are_one_line_errors(self):
        d, _ = self.models["llama"]
        bad = os.path.join(self.tmp.name, "bad")
        os.makedirs(bad, exist_ok=True)
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        os.link(os.path.join(d, "model.safetensors"), os.path.join(bad, "model.safetensors"))
        for change, pattern in [({"num_key_value_heads": 3}, "num_key_value_heads 3 must divide"),
                                ({"rope_scaling": {"type": "cubic", "factor": 2.0}}, "rope"),
                                ({"hidden_act": "tanhshrink"}, "hidden_act 'tanhshrink' is not supported")]:
            with open(os.path.join(bad, "config.json"), "w") as f:
                json.dump({**config, **change}, f)
            rc, out, err = attnkit("encode", "--model", bad, "--ids", "3 4 5")
            self.assertNotEqual(rc, 0)
            self.assertIn(pattern, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    for i, a in enumerate(list(sys.argv)):
        if a == "--build-dir" and i + 1 < len(sys.argv):
            BUILD_DIR = sys.argv[i + 1]
            del sys.argv[i:i + 2]
            break
    unittest.main()
