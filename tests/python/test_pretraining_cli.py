#!/usr/bin/python3
"""attnkit train --task.name mlm / plm end to end: an mlm run resumes bit-identically (the masks are a
pure function of seed and micro-batch), its checkpoint converts to Hugging Face layout and loads in
transformers' BertForMaskedLM with logits equal to `attnkit encode`'s within 1e-4, and the run
directory fine-tunes seq2seq through --init; `eval --items` gives one perplexity item per validation
block; plm trains and refuses cosFormer in one line.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh), which has transformers."""
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import BertForMaskedLM  # noqa: E402

BUILD_DIR = "build"
TOLERANCE = 1e-4
WORDS = ["alpha", "beta", "gamma", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "--quiet", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [(r["step"], r["loss"]) for r in records if "loss" in r and "eval" not in r]


class PretrainingCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        # A WordPiece vocabulary with "##" pieces (words split as "alp ##ha" are not needed: the
        # vocabulary holds whole words, and "##s" makes plurals two tokens for whole-word masking).
        with open(os.path.join(self.dir, "vocab.txt"), "w") as f:
            f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##s"] + WORDS) + "\n")
        rng = random.Random(1)
        for name, lines in (("a.txt", 60), ("b.txt", 40)):
            with open(os.path.join(self.dir, name), "w") as f:
                for _ in range(lines):
                    f.write(" ".join(rng.choice(WORDS) + ("s" if rng.random() < 0.3 else "") for _ in range(8)) + "\n")
        self.common = ["--task.data", os.path.join(self.dir, "a.txt") + "," + os.path.join(self.dir, "b.txt"),
                       "--task.tokenizer", os.path.join(self.dir, "vocab.txt"), "--task.truncate", "16",
                       "--task.batch_size", "4", "--model.hidden", "32", "--model.layers", "2",
                       "--model.heads", "2", "--schedule.kind", "constant", "--run.log_every", "1"]

    def tearDown(self):
        self.tmp.cleanup()

    def train(self, run_dir, *extra):
        rc, _, err = attnkit("train", *self.common, "--run.dir", run_dir, *extra)
        self.assertEqual(rc, 0, err)

    def test_mlm_resumes_exactly_and_loads_in_transformers(self):
        full, part = os.path.join(self.dir, "full"), os.path.join(self.dir, "part")
        mlm = ["--task.name", "mlm", "--task.whole_word", "true"]
        self.train(full, *mlm, "--run.steps", "6")
        self.train(part, *mlm, "--run.steps", "3")
        rc, _, err = attnkit("train", "--resume", part, "--run.steps", "6")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(losses(full)), 6)
        self.assertEqual(losses(part), losses(full))  # dropout on, masks redrawn: bit for bit
        hf_dir = os.path.join(self.dir, "hf")
        rc, _, err = attnkit("convert", "--from", full, "--to", hf_dir, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(hf_dir, "config.json")) as f:
            self.assertEqual(json.load(f)["architectures"], ["BertForMaskedLM"])
        ids = [2, 6, 5, 11, 4, 15, 9, 3]  # [CLS] alpha ##s fox [MASK] juliet delta [SEP]
        out = os.path.join(self.dir, "encoded.safetensors")
        rc, _, err = attnkit("encode", "--model", full, "--ids", " ".join(map(str, ids)), "--output", out)
        self.assertEqual(rc, 0, err)
        got = load_file(out)["mlm_logits"]
        model = BertForMaskedLM.from_pretrained(hf_dir).eval()
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([ids])).logits
        self.assertEqual(list(got.shape), [1, len(ids), 16])
        self.assertLess((ref - got).abs().max().item(), TOLERANCE)
        # The run directory fine-tunes a UniLM seq2seq task: every tensor (masked-LM head, two
        # token types) is taken over, and its tokenizer comes from the checkpoint.
        rng = random.Random(2)
        for split, count in (("train", 12), ("val", 4)):
            with open(os.path.join(self.dir, f"pairs_{split}.tsv"), "w") as f:
                for _ in range(count):
                    words = [rng.choice(WORDS) for _ in range(3)]
                    f.write(" ".join(words) + "\t" + " ".join(reversed(words)) + "\n")
        rc, _, err = attnkit("train", "--task.name", "seq2seq", "--task.data", os.path.join(self.dir, "pairs_train.tsv"),
                             "--init", full, "--task.batch_size", "4", "--task.truncate", "16", "--run.steps", "2",
                             "--run.dir", os.path.join(self.dir, "s2s"))
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"init: \d+ tensors .*; new: none")

    def test_mlm_eval_items(self):
        """`eval --items` of an mlm run: one item per validation block with a masked token (its
        masked tokens' summed negative log-likelihood and their count); their corpus perplexity is
        the printed one, and --paired-bs of the run against its own items is exactly 0, level."""
        run = os.path.join(self.dir, "items")
        self.train(run, "--task.name", "mlm", "--task.mask_probability", "0.4", "--task.truncate", "8",
                   "--task.eval_examples", "50", "--run.steps", "2")  # blocks of 8: several validation blocks
        items, paired = os.path.join(self.dir, "mlm-items.json"), os.path.join(self.dir, "paired.json")
        # Another validation count would move blocks between training and validation: refused.
        rc, _, err = attnkit("eval", "--run", run, "--split", "val", "--examples", "0", "--items", items)
        self.assertEqual(rc, 2, err)
        self.assertIn("held out its validation blocks from the training text by task.eval_examples (50", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(items))
        base = ["eval", "--run", run, "--split", "val"]
        rc, out, err = attnkit(*base, "--items", items)
        self.assertEqual(rc, 0, err)
        with open(items) as f:
            saved = json.load(f)
        nll, tokens = saved["values"][0::2], saved["values"][1::2]
        self.assertEqual((saved["metric"], saved["width"], saved["items"]), ("perplexity", 2, len(tokens)))
        self.assertGreater(len(tokens), 1)  # not one item for the whole split
        self.assertTrue(all(1 <= t <= 8 for t in tokens), tokens)  # at most a block of 8 tokens each
        self.assertLessEqual(len(tokens), 50)
        self.assertGreater(max(tokens), 1)  # not one item per token
        perplexity = float(re.search(r" perplexity=([0-9.eE+-]+)", out).group(1))
        self.assertAlmostEqual(math.exp(sum(nll) / sum(tokens)) / perplexity, 1.0, delta=1e-5)
        rc, out, err = attnkit(*base, "--paired-bs", items, "--bs-samples", "50", "--json", paired)
        self.assertEqual(rc, 0, err)
        with open(paired) as f:
            result = json.load(f)
        self.assertEqual((result["difference"]["low"], result["difference"]["high"], result["verdict"]),
                         (0.0, 0.0, "level"))

    def test_plm_trains_and_refuses_cosformer(self):
        run = os.path.join(self.dir, "plm")
        self.train(run, "--task.name", "plm", "--task.predict_last", "5", "--run.steps", "3")
        self.assertEqual(len(losses(run)), 3)
        rc, _, err = attnkit("train", *self.common, "--task.name", "plm", "--model.attention", "cosformer",
                             "--run.dir", os.path.join(self.dir, "cos"))
        self.assertEqual(rc, 2)
        self.assertEqual(err.strip().count("\n"), 0, err)
        self.assertIn("cannot take the permutation mask", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "cos")))


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
