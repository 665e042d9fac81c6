#!/usr/bin/python3
"""attnkit train --init, analyze heads, prune and report end to end: a tiny BERT masked-LM made
and saved by Hugging Face transformers (test venv) with a WordPiece vocab.txt is fine-tuned on a
small classification TSV (`train --init`: the encoder loaded, the classifier new, one report
line); `analyze heads` writes heads.json (importance, ablations, three profiles, cross-data
correlation), the SVGs and a report section that `attnkit report` renders; `analyze heads --run`
covers every checkpoint; `prune --fraction 0.5 --importance heads.json` writes a smaller model
that loads and still runs; bad arguments are one-line errors. The same for a causal language
model: a tiny GPT2LMHeadModel made by transformers (the same WordPiece vocabulary) trained further
by `train --init` on plain text (task lm); `analyze heads` on a text file scores it by next-token
cross entropy (metric next_token_accuracy, loss and perplexity in heads.json), `--run` covers its
checkpoints, `prune --fraction --data` prunes it by that importance."""
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
import transformers  # noqa: E402


BUILD_DIR = "build"
WORDS = ["good", "great", "bad", "awful", "movie", "the", "a", "plot", "actor", "fine", "film", "was"]


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def write_data(path, count, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            words = [rng.choice(WORDS) for _ in range(8)]
            pos = sum(w in ("good", "great") for w in words)
            neg = sum(w in ("bad", "awful") for w in words)
            f.write(" ".join(words) + "\t" + ("pos" if pos >= neg else "neg") + "\n")


def write_text(path, count, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            f.write(" ".join(rng.choice(WORDS) for _ in range(8)) + "\n")


def write_vocab(directory):
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")


def train_init(base, task, data, batch_size, run_dir):
    """`train --init BASE` for 40 steps of TASK on DATA, a checkpoint and an evaluation every 20."""
    return attnkit("train", "--init", base, "--task.name", task, "--task.data", data,
                   "--task.batch_size", str(batch_size), "--task.truncate", "16", "--run.steps", "40",
                   "--run.checkpoint_every", "20", "--run.eval_every", "20", "--run.dir", run_dir,
                   "--optimizer.lr", "1e-3")


class TrainedRun:
    """For a test class whose setUpClass trains into cls.run_dir inside cls.tmp."""

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def checkpoint(self, step):
        return os.path.join(self.run_dir, "checkpoints", f"step-{step:08d}")


class HeadsCli(TrainedRun, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.base = os.path.join(d, "base")
        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=32)
        transformers.BertForMaskedLM(config).save_pretrained(cls.base, safe_serialization=True)
        write_vocab(cls.base)
        cls.train_tsv = os.path.join(d, "train.tsv")
        write_data(cls.train_tsv, 256, 1)
        write_data(os.path.join(d, "val.tsv"), 64, 2)
        cls.other_tsv = os.path.join(d, "other.tsv")
        write_data(cls.other_tsv, 64, 3)
        cls.run_dir = os.path.join(d, "run")
        cls.rc, cls.out, cls.err = train_init(cls.base, "classification", cls.train_tsv, 16, cls.run_dir)

    def test_train_init_reports_loaded_and_new(self):
        self.assertEqual(self.rc, 0, self.err)
        lines = [l for l in self.err.splitlines() if l.startswith("init:")]
        self.assertEqual(len(lines), 1, self.err)
        self.assertIn(self.base, lines[0])
        self.assertIn("huggingface layout", lines[0])
        self.assertIn("new: classifier.weight, classifier.bias", lines[0])
        self.assertTrue(os.path.isdir(self.checkpoint(40)))

    def test_analyze_prune_and_report(self):
        self.assertEqual(self.rc, 0, self.err)
        out = os.path.join(self.tmp.name, "heads")
        rc, stdout, err = attnkit("analyze", "heads", "--model", self.checkpoint(40), "--tokenizer", self.base,
                                  "--data", os.path.join(self.tmp.name, "val.tsv"), "--data2", self.other_tsv,
                                  "--fractions", "25,50,75", "--out", out)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "heads.json")) as f:
            j = json.load(f)
        self.assertEqual([len(row) for row in j["importance"]["importance"]], [4, 4])
        self.assertEqual([len(row) for row in j["ablation"]["single"]], [4, 4])
        self.assertEqual([p["order"] for p in j["profiles"]], ["importance", "random", "reverse"])
        self.assertEqual([s["pruned"] for s in j["profiles"][0]["steps"]], [0, 2, 4, 6])
        self.assertIn("pearson", j["cross_data"])
        for name in ("heads_importance.svg", "heads_profile.svg", "section.json"):
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        # Every metric pass was kept in passes.jsonl: the same command again computes none of them
        # and writes the same heads.json.
        self.assertNotIn("resumed:", stdout)
        with open(os.path.join(out, "passes.jsonl")) as f:
            stored = len(f.read().splitlines()) - 1
        rc, stdout, err = attnkit("analyze", "heads", "--model", self.checkpoint(40), "--tokenizer", self.base,
                                  "--data", os.path.join(self.tmp.name, "val.tsv"), "--data2", self.other_tsv,
                                  "--fractions", "25,50,75", "--out", out)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"resumed: {stored} of the {stored} metric passes were done by an earlier process", stdout)
        with open(os.path.join(out, "heads.json")) as f:
            self.assertEqual(json.load(f), j)
        # The data file written again with the same text (a script's rerun: a new modification
        # time) keeps the passes; other text makes them stale, a one-line error.
        val = os.path.join(self.tmp.name, "val.tsv")
        with open(val) as f:
            text = f.read()
        os.utime(val, (0, 0))
        with open(val, "w") as f:
            f.write(text)
        rc, stdout, err = attnkit("analyze", "heads", "--model", self.checkpoint(40), "--tokenizer", self.base,
                                  "--data", val, "--data2", self.other_tsv, "--fractions", "25,50,75", "--out", out)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"resumed: {stored} of the {stored} metric passes", stdout)
        with open(val, "w") as f:
            f.write(text.replace("\t1\n", "\t0\n", 1) if "\t1\n" in text else text + text.splitlines()[0] + "\n")
        rc, _, err = attnkit("analyze", "heads", "--model", self.checkpoint(40), "--tokenizer", self.base,
                             "--data", val, "--data2", self.other_tsv, "--fractions", "25,50,75", "--out", out)
        self.assertEqual(rc, 2, err)
        self.assertIn("its passes were computed with other settings", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        with open(val, "w") as f:
            f.write(text)
        rc, _, err = attnkit("report", self.tmp.name)
        self.assertEqual(rc, 0, err)
        # Prune half the heads by that importance; the smaller model loads and runs.
        pruned = os.path.join(self.tmp.name, "pruned")
        rc, stdout, err = attnkit("prune", "--model", self.checkpoint(40), "--fraction", "0.5",
                                  "--importance", os.path.join(out, "heads.json"), "--out", pruned)
        self.assertEqual(rc, 0, err)
        self.assertIn("pruned 4 of 8 heads", stdout)
        with open(os.path.join(pruned, "config.json")) as f:
            recorded = json.load(f)["model"]["pruned_heads"]
        self.assertEqual(sum(len(v) for v in recorded.values()), 4)
        rc, stdout, err = attnkit("encode", "--model", pruned, "--ids", "2 5 6 3")
        self.assertEqual(rc, 0, err)

    def test_across_training(self):
        self.assertEqual(self.rc, 0, self.err)
        out = os.path.join(self.tmp.name, "over")
        rc, _, err = attnkit("analyze", "heads", "--run", self.run_dir, "--tokenizer", self.base,
                             "--data", os.path.join(self.tmp.name, "val.tsv"), "--fractions", "50",
                             "--out", out)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "heads_over_training.json")) as f:
            j = json.load(f)
        self.assertEqual([c["step"] for c in j["checkpoints"]], [20, 40])
        self.assertTrue(os.path.exists(os.path.join(out, "heads_profile_over_training.svg")))

    def test_errors_are_one_line(self):
        for argv in (["prune", "--model", self.base, "--out", os.path.join(self.tmp.name, "x"), "--fraction", "0.5"],
                     ["analyze", "heads", "--model", self.base, "--data", self.train_tsv, "--out",
                      os.path.join(self.tmp.name, "y")]):
            rc, _, err = attnkit(*argv)
            self.assertNotEqual(rc, 0)
            self.assertEqual(len(err.strip().splitlines()), 1, err)


class HeadsCliLanguageModel(TrainedRun, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.base = os.path.join(d, "gpt2")
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=5 + len(WORDS), n_embd=32, n_layer=2, n_head=4,
                                         n_positions=32)
        transformers.GPT2LMHeadModel(config).save_pretrained(cls.base, safe_serialization=True)
        write_vocab(cls.base)
        cls.train_txt = os.path.join(d, "train.txt")
        write_text(cls.train_txt, 200, 1)
        cls.val_txt = os.path.join(d, "val.txt")
        write_text(cls.val_txt, 40, 2)  # 320 tokens: 21 windows of 16 sharing one token
        cls.run_dir = os.path.join(d, "run")
        cls.rc, cls.out, cls.err = train_init(cls.base, "lm", cls.train_txt, 8, cls.run_dir)

    def analyze(self, *argv):
        return attnkit("analyze", "heads", "--tokenizer", self.base, "--data", self.val_txt,
                       "--max-length", "16", *argv)

    def test_analyze_and_prune(self):
        self.assertEqual(self.rc, 0, self.err)
        out = os.path.join(self.tmp.name, "heads")
        rc, stdout, err = self.analyze("--model", self.checkpoint(40), "--fractions", "25,50,75",
                                       "--out", out)
        self.assertEqual(rc, 0, err)
        self.assertIn("next_token_accuracy baseline", stdout)
        self.assertIn("perplexity", stdout)
        with open(os.path.join(out, "heads.json")) as f:
            j = json.load(f)
        self.assertEqual(j["metric"], "next_token_accuracy")
        self.assertGreater(j["baseline_loss"], 0.0)
        self.assertAlmostEqual(j["baseline_perplexity"], math.exp(j["baseline_loss"]), places=6)
        self.assertEqual(j["importance"]["tokens"], 21 * 16)  # every window, all real tokens
        self.assertEqual([len(row) for row in j["importance"]["importance"]], [4, 4])
        self.assertEqual([len(row) for row in j["ablation"]["single"]], [4, 4])
        self.assertEqual([s["pruned"] for s in j["profiles"][0]["steps"]], [0, 2, 4, 6])
        for name in ("heads_importance.svg", "heads_profile.svg", "section.json"):
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        with open(os.path.join(out, "heads_profile.svg")) as f:
            self.assertIn("next_token_accuracy", f.read())
        # Pruned by the importance scored on the text; the smaller model loads and runs.
        pruned = os.path.join(self.tmp.name, "pruned")
        rc, stdout, err = attnkit("prune", "--model", self.checkpoint(40), "--fraction", "0.5",
                                  "--tokenizer", self.base, "--data", self.val_txt, "--max-length", "16",
                                  "--out", pruned)
        self.assertEqual(rc, 0, err)
        self.assertIn("pruned 4 of 8 heads", stdout)
        rc, stdout, err = self.analyze("--model", pruned, "--no-ablation", "--fractions", "50",
                                       "--out", os.path.join(self.tmp.name, "pruned-heads"))
        self.assertEqual(rc, 0, err)

    def test_across_training(self):
        self.assertEqual(self.rc, 0, self.err)
        out = os.path.join(self.tmp.name, "over")
        rc, _, err = self.analyze("--run", self.run_dir, "--fractions", "50", "--out", out)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "heads_over_training.json")) as f:
            j = json.load(f)
        self.assertEqual([c["step"] for c in j["checkpoints"]], [20, 40])
        self.assertEqual({c["analysis"]["metric"] for c in j["checkpoints"]}, {"next_token_accuracy"})
        with open(os.path.join(out, "heads_profile_over_training.svg")) as f:
            self.assertIn("next_token_accuracy", f.read())

    def test_run_directory_is_a_model(self):
        """A run of `train --task.name lm` is a model: its checkpoints carry the tokenizer, and
        --model RUN means its best checkpoint (evaluations every 20 steps wrote one)."""
        self.assertEqual(self.rc, 0, self.err)
        for step in (20, 40):
            self.assertTrue(os.path.isfile(os.path.join(self.checkpoint(step), "tokenizer.json")))
        best = os.path.join(self.run_dir, "checkpoints", "best")
        self.assertTrue(os.path.isfile(os.path.join(best, "tokenizer.json")))
        rc, out, err = attnkit("generate", "--model", self.run_dir, "--prompt", "the movie",
                               "--max-new-tokens", "4", "--no-eos", "--json")
        self.assertEqual(rc, 0, err)
        result = json.loads(out)["results"][0]
        self.assertEqual(result["prompt"], "the movie")
        self.assertEqual(len(result["sequences"][0]["ids"]), 4)
        self.assertIsInstance(result["sequences"][0]["text"], str)  # detokenized: a tokenizer was found
        # The same through the checkpoint directory, and heads analysis with no --tokenizer.
        rc, out2, err = attnkit("generate", "--model", best, "--prompt", "the movie",
                                "--max-new-tokens", "4", "--no-eos", "--json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out2)["results"][0]["sequences"], result["sequences"])
        out_dir = os.path.join(self.tmp.name, "heads-run")
        rc, stdout, err = attnkit("analyze", "heads", "--model", self.run_dir, "--data", self.val_txt,
                                  "--max-length", "16", "--fractions", "50", "--no-ablation",
                                  "--out", out_dir)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out_dir, "heads.json")) as f:
            j = json.load(f)
        self.assertEqual(j["sites"], [{"name": "decoder.self", "layers": 2, "first_row": 0}])
        self.assertIn("pruned_by_site", j["profiles"][0]["steps"][1])

    def test_short_text_is_one_line_error(self):
        short = os.path.join(self.tmp.name, "short.txt")
        with open(short, "w") as f:
            f.write("good movie\n")
        rc, _, err = attnkit("analyze", "heads", "--model", self.base, "--data", short, "--out",
                             os.path.join(self.tmp.name, "z"))
        self.assertNotEqual(rc, 0)
        self.assertEqual(err.strip(),
                         f"attnkit: error: --data {short}: 2 tokens, fewer than one window of 32 tokens")


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
