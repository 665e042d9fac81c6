#!/usr/bin/python3
"""attnkit generate against Hugging Face transformers' `generate` (the held-out peer): a tiny random
GPT-2 built and saved by transformers (safetensors, with a byte-level BPE tokenizer), decoded
greedily and with beam search (several widths, length penalties, early stopping, n-best, EOS,
left-padded batches of different lengths). Token ids must be equal and beam sequence scores
within 1e-4 (float32 models).

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh), which has transformers 4.38.2."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast  # noqa: E402
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode  # noqa: E402


BUILD_DIR = "build"
SCORE_TOLERANCE = 1e-4


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def make_model_dir(directory, seed=0):
    """A tiny GPT-2 (random weights, initializer_range 0.3 so distributions are peaked and beam
    scores have no near-ties) with a byte-level BPE tokenizer of 256 bytes + a few merges."""
    byte_chars = list(bytes_to_unicode().values())
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("Ġ", "s"), ("e", "r"),
              ("o", "n"), ("Ġ", "c"), ("a", "t")]
    vocab = {c: i for i, c in enumerate(byte_chars)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    eos = vocab["<|endoftext|>"]
    tokenizer = GPT2TokenizerFast(vocab_file=os.path.join(directory, "vocab.json"),
                                  merges_file=os.path.join(directory, "merges.txt"))
    tokenizer.save_pretrained(directory)
    config = GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=eos, eos_token_id=eos, initializer_range=0.3,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model, tokenizer


def cut_at_eos(ids, eos_ids):
    out = []
    for t in ids:
        out.append(t)
        if t in eos_ids:
            break
    return out


class GenerateHf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "gpt2")
        cls.model, cls.tokenizer = make_model_dir(cls.dir, seed=1)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def hf_generate(self, prompts, eos, **kwargs):
        """-> per prompt, a list of (new ids cut after EOS, sequence score or None)."""
        self.tokenizer.padding_side = "left"
        self.tokenizer.pad_token = self.tokenizer.eos_token
        batch = self.tokenizer(prompts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.model.generate(**batch, eos_token_id=eos, pad_token_id=self.tokenizer.eos_token_id,
                                      do_sample=False, output_scores=True,
                                      return_dict_in_generate=True, **kwargs)
        width = batch["input_ids"].shape[1]
        n = kwargs.get("num_return_sequences", 1)
        eos_ids = eos if isinstance(eos, list) else [eos]
        results = []
        for p in range(len(prompts)):
            rows = []
            for j in range(n):
                i = p * n + j
                ids = cut_at_eos(out.sequences[i, width:].tolist(), eos_ids)
                score = out.sequences_scores[i].item() if hasattr(out, "sequences_scores") and \
                    out.sequences_scores is not None else None
                rows.append((ids, score))
            results.append(rows)
        return results, batch

    def attnkit_generate(self, prompts, eos, *args):
        argv = ["generate", "--model", self.dir, "--json"]
        for p in prompts:
            argv += ["--prompt", p]
        for e in (eos if isinstance(eos, list) else [eos]):
            argv += ["--eos-id", str(e)]
        code, out, err = attnkit(*argv, *args)
        self.assertEqual(code, 0, err)
        return json.loads(out)["results"]

    def compare(self, prompts, eos, hf_kwargs, cli_args):
        expected, batch = self.hf_generate(prompts, eos, **hf_kwargs)
        got = self.attnkit_generate(prompts, eos, *cli_args)
        self.assertEqual(len(got), len(prompts))
        for p, prompt in enumerate(prompts):
            mask = batch["attention_mask"][p].bool()
            self.assertEqual(got[p]["prompt_ids"], batch["input_ids"][p][mask].tolist(), prompt)
            seqs = got[p]["sequences"]
            self.assertEqual(len(seqs), len(expected[p]), prompt)
            for (ids, score), s in zip(expected[p], seqs):
                self.assertEqual(s["ids"], ids, f"{prompt!r} {hf_kwargs}")
                if score is not None:
                    self.assertAlmostEqual(s["score"], score, delta=SCORE_TOLERANCE,
                                           msg=f"{prompt!r} {hf_kwargs}")

    def greedy_token(self, prompt, step):
        """The token HF's greedy decoding picks at `step` (an EOS that is actually reached)."""
        expected, _ = self.hf_generate([prompt], [-1], max_new_tokens=step + 1)
        return expected[0][0][0][step]

    def test_greedy(self):
        prompts = ["the cat", "a"]
        for p in prompts:
            self.compare([p], self.tokenizer.eos_token_id, {"max_new_tokens": 12},
                         ["--max-new-tokens", "12"])

    def test_greedy_batch_left_padded(self):
        prompts = ["the cat sat on the", "in", "son at the"]
        self.compare(prompts, self.tokenizer.eos_token_id, {"max_new_tokens": 10},
                     ["--max-new-tokens", "10"])

    def test_greedy_with_eos_reached(self):
        eos = self.greedy_token("the cat", 3)
        self.compare(["the cat", "a"], eos, {"max_new_tokens": 10}, ["--max-new-tokens", "10"])

    def test_beam(self):
        eos = self.greedy_token("the cat", 2)
        cases = [
            ({"num_beams": 1}, []),
            ({"num_beams": 3}, []),
            ({"num_beams": 4, "length_penalty": 0.5}, ["--length-penalty", "0.5"]),
            ({"num_beams": 4, "early_stopping": True}, ["--early-stopping"]),
            ({"num_beams": 5, "num_return_sequences": 3}, ["--num-return-sequences", "3"]),
        ]
        for kwargs, extra in cases:
            for prompt_set in (["the cat"], ["the cat sat", "in"]):
                for e in (self.tokenizer.eos_token_id, eos):
                    cli = ["--strategy", "beam", "--beams", str(kwargs["num_beams"]),
                           "--max-new-tokens", "8"] + extra
                    with self.subTest(kwargs=kwargs, prompts=prompt_set, eos=e):
                        if kwargs["num_beams"] == 1:
                            # HF routes num_beams=1 to greedy (no sequence score): ids only.
                            expected, _ = self.hf_generate(prompt_set, e, max_new_tokens=8)
                            got = self.attnkit_generate(prompt_set, e, *cli, "--early-stopping")
                            for p in range(len(prompt_set)):
                                self.assertEqual(got[p]["sequences"][0]["ids"], expected[p][0][0])
                        else:
                            self.compare(prompt_set, e, dict(kwargs, max_new_tokens=8), cli)

    def test_streaming_text_and_tokenizer(self):
        # Streamed text, as raw bytes (a random model emits byte tokens that are not UTF-8).
        p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "generate",
                            "--model", self.dir, "--prompt", "the cat", "--max-new-tokens", "9"],
                           capture_output=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        expected, _ = self.hf_generate(["the cat"], self.tokenizer.eos_token_id, max_new_tokens=9)
        byte_of = {c: b for b, c in bytes_to_unicode().items()}
        tokens = self.tokenizer.convert_ids_to_tokens(
            [t for t in expected[0][0][0] if t != self.tokenizer.eos_token_id])
        text = bytes(byte_of[c] for c in "".join(tokens))
        self.assertEqual(p.stdout, b"the cat" + text + b"\n")

    def test_bad_input(self):
        code, _, err = attnkit("generate", "--model", self.dir, "--prompt-ids", "1 99999")
        self.assertEqual(code, 2)
        self.assertIn("outside the model's vocabulary", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        # A prompt longer than the 64 learned positions: named before any decoding, or cut by
        # --max-input-length to its first tokens.
        long_prompt = " ".join(str(5 + i % 20) for i in range(70))
        code, _, err = attnkit("generate", "--model", self.dir, "--prompt-ids", "1 2", "--prompt-ids",
                               long_prompt)
        self.assertEqual(code, 2)
        self.assertIn("prompt 2 has 70 tokens, more than the model's 64 positions", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        code, out, err = attnkit("generate", "--model", self.dir, "--prompt-ids", long_prompt,
                                 "--max-input-length", "60", "--max-new-tokens", "3", "--no-eos", "--json")
        self.assertEqual(code, 0, err)
        result = json.loads(out)["results"][0]
        self.assertEqual(result["prompt_ids"], [int(t) for t in long_prompt.split()][:60])
        self.assertEqual(len(result["sequences"][0]["ids"]), 3)

    def test_length_past_the_positions(self):
        """The 64 learned positions end: an explicit --max-new-tokens past what they leave after the
        longest prompt (64 - L + 1: its last token is never fed back) is a one-line error before any
        decoding, at the limit it decodes every token, and the default (20) is cut to the limit."""
        prompt = " ".join(str(5 + i % 20) for i in range(50))  # 50 tokens: 15 new ones fit
        base = ["generate", "--model", self.dir, "--prompt-ids", "1 2", "--prompt-ids", prompt, "--no-eos", "--json"]
        code, _, err = attnkit(*base, "--max-new-tokens", "16")
        self.assertEqual(code, 2, err)
        self.assertIn("--max-new-tokens 16 does not fit the model's 64 positions: 15 at most after a prompt "
                      "of 50 tokens", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        for extra in (["--max-new-tokens", "15"], []):
            code, out, err = attnkit(*base, *extra)
            self.assertEqual(code, 0, err)
            self.assertEqual([len(r["sequences"][0]["ids"]) for r in json.loads(out)["results"]], [15, 15], extra)

    def test_batch_size(self):
        # Three prompts of different lengths, greedy: one at a time or two at a time gives what one
        # batch gives, and the timing counts add up over the batches.
        prompts = ["1 2 3", "4 5 6 7 8 9", "10"]
        argv = ["generate", "--model", self.dir, "--max-new-tokens", "5", "--no-eos", "--json"]
        for p in prompts:
            argv += ["--prompt-ids", p]
        docs = {}
        for batch in ("0", "1", "2"):
            code, out, err = attnkit(*argv, "--batch-size", batch)
            self.assertEqual(code, 0, err)
            docs[batch] = json.loads(out)
        ids = lambda d: [r["sequences"][0]["ids"] for r in d["results"]]  # noqa: E731
        self.assertEqual(ids(docs["1"]), ids(docs["0"]))
        self.assertEqual(ids(docs["2"]), ids(docs["0"]))
        for batch in ("1", "2"):
            self.assertEqual(docs[batch]["timing"]["prompt_tokens"], 10)
            self.assertEqual(docs[batch]["timing"]["new_tokens"], 15)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
