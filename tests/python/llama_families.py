"""Shared checks of the Llama-family peer tests (test_llama_families_hf.py: transformers 4.38;
test_llama_families_hf5.py: transformers 5.x): a tiny random model of each family made and saved
by transformers; attnkit must give the same hidden states and logits (<= 1e-4 relative to the
largest value), the same greedy and beam-4 ids on a left-padded batch of two prompts, and re-save
the directory so that transformers loads it with the same outputs.

The weights are drawn with a larger std than the families' 0.02 (initializer_range 0.2): with
0.02 every logit is near every other and a wrong model can still pick the same ids."""
import json
import os
import subprocess
import tempfile

import torch
from safetensors.torch import load_file

TOLERANCE = 1e-4
VOCAB = 97
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=128, initializer_range=0.2,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def max_relative(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1.0)).item()


class FamilyChecks:
    """Mixin for a unittest.TestCase with FAMILIES = {name: (config class, model class, options)},
    BUILD_DIR and NO_EOS (the generate() argument that never stops: [-1] for 4.38, None for 5.x)."""
    FAMILIES = {}
    NO_EOS = {"eos_token_id": [-1]}
    # New tokens per generation where a family needs fewer (see test_llama_families_hf5.py).
    NEW_TOKENS = {}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.models = {}
        for seed, (name, (config_class, model_class, extra)) in enumerate(cls.FAMILIES.items()):
            d = os.path.join(cls.tmp.name, name)
            config = config_class(**{**COMMON, **extra})
            config._attn_implementation = "eager"
            torch.manual_seed(seed + 11)
            model = model_class(config).eval()
            model.save_pretrained(d, safe_serialization=True)
            cls.models[name] = (d, model)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def attnkit(self, *argv):
        p = subprocess.run([os.path.join(self.BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                           capture_output=True, text=True, timeout=300)
        return p.returncode, p.stdout, p.stderr

    def encode(self, d, ids):
        out = os.path.join(self.tmp.name, "encoded.safetensors")
        rc, _, err = self.attnkit("encode", "--model", d, "--ids", " ".join(map(str, ids)), "--output", out)
        self.assertEqual(rc, 0, err)
        return load_file(out)

    def check_forward(self, name, d, model):
        g = torch.Generator().manual_seed(5)
        for n in (13, 24):  # 24: past a longrope model's original_max_position_embeddings
            ids = torch.randint(3, VOCAB, (1, n), generator=g)
            with torch.no_grad():
                ref = model(ids, output_hidden_states=True)
            got = self.encode(d, ids[0].tolist())
            for k, h in enumerate(ref.hidden_states):
                err = max_relative(got[f"hidden_states.{k}"], h)
                self.assertLessEqual(err, TOLERANCE, f"{name}: n={n}: hidden_states.{k} differs by {err}")
            err = max_relative(got["logits"], ref.logits)
            self.assertLessEqual(err, TOLERANCE, f"{name}: n={n}: logits differ by {err}")

    def hf_generate(self, model, prompts, **kwargs):
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, pad_token_id=0,
                                 return_dict_in_generate=True, **self.NO_EOS, **kwargs)
        n = kwargs.get("num_return_sequences", 1)
        return [out.sequences[i, width:].tolist() for i in range(len(prompts) * n)]

    def attnkit_generate(self, d, prompts, *args):
        argv = ["generate", "--model", d, "--json", "--no-eos"]
        for p in prompts:
            argv += ["--prompt-ids", " ".join(map(str, p))]
        rc, out, err = self.attnkit(*argv, *args)
        self.assertEqual(rc, 0, err)
        return [s["ids"] for r in json.loads(out)["results"] for s in r["sequences"]]

    def check_generate(self, name, d, model):
        prompts = [[5, 17, 33, 9, 41, 60, 7, 12, 3], [44, 8, 91]]
        greedy, beam = self.NEW_TOKENS.get(name, 20), min(self.NEW_TOKENS.get(name, 12), 12)
        expected = self.hf_generate(model, prompts, max_new_tokens=greedy)
        got = self.attnkit_generate(d, prompts, "--max-new-tokens", str(greedy))
        self.assertEqual(got, expected, f"{name}: greedy ids")
        expected = self.hf_generate(model, prompts, max_new_tokens=beam, num_beams=4,
                                    num_return_sequences=2)
        got = self.attnkit_generate(d, prompts, "--max-new-tokens", str(beam), "--strategy", "beam",
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
                rc, _, err = self.attnkit("convert", "--from", d, "--to", out, "--format", "huggingface")
                self.assertEqual(rc, 0, err)
                self.assertEqual(load_file(os.path.join(out, "model.safetensors")).keys(),
                                 load_file(os.path.join(d, "model.safetensors")).keys())
                again = type(model).from_pretrained(out, attn_implementation="eager").eval()
                ids = torch.tensor([[4, 9, 16, 25, 36, 49, 64, 81]])
                with torch.no_grad():
                    self.assertTrue(torch.equal(again(ids).logits, model(ids).logits), name)
                # attnkit's own format: the same logits.
                ak = os.path.join(self.tmp.name, name + "-attnkit")
                self.assertEqual(self.attnkit("convert", "--from", d, "--to", ak)[0], 0)
                got = self.encode(ak, ids[0].tolist())
                with torch.no_grad():
                    err = max_relative(got["logits"], model(ids).logits)
                self.assertLessEqual(err, TOLERANCE, f"{name}: attnkit format: logits differ by {err}")
