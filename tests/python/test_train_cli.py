#!/usr/bin/python3
"""attnkit train / eval / data listops end to end: a run directory with config.toml, metrics.jsonl
and checkpoints; `--resume` continues bit-identically to an uninterrupted run; `--nproc 2`
trains data-parallel over Gloo; bad settings are one-line errors."""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

BUILD_DIR = "build"

TINY = ["--task.name", "copy", "--task.train_examples", "64", "--task.eval_examples", "8",
        "--task.batch_size", "4", "--task.min_length", "3", "--task.max_length", "5",
        "--task.symbols", "4", "--model.hidden", "16", "--model.layers", "1", "--model.heads", "2",
        "--model.dropout", "0.1", "--run.log_every", "1", "--run.checkpoint_every", "3"]


def attnkit(*argv, threads=1):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", str(threads), "--quiet", *argv],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def has_gloo():
    """False for a build against a PyPI torch 2.x (`make build TORCH=...`), which has no c10d Gloo
    backend (docs/architecture.md, "Building against LibTorch 2.x")."""
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        return not any(line.startswith("ATTNKIT_TORCH_PYTHON:") and line.strip().split("=", 1)[1]
                       for line in f)


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [(r["step"], r["loss"]) for r in records if "loss" in r and "eval" not in r]


def metric(text, name):
    """The value of NAME=VALUE in an `attnkit eval` line (the whole key: not unigram_NAME)."""
    return float(dict(part.split("=", 1) for part in text.split() if "=" in part)[name])


class TrainCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def train(self, run_dir, *extra):
        rc, out, err = attnkit("train", *TINY, "--run.dir", run_dir, *extra)
        self.assertEqual(rc, 0, err)
        return out

    def test_run_directory_eval_and_exact_resume(self):
        full = os.path.join(self.dir, "full")
        # A constant rate: a cosine schedule over 3 steps would differ from one over 6.
        self.train(full, "--run.steps", "6", "--schedule.kind", "constant")
        self.assertTrue(os.path.isfile(os.path.join(full, "config.toml")))
        self.assertTrue(os.path.isdir(os.path.join(full, "checkpoints", "step-00000006")))
        self.assertEqual([s for s, _ in losses(full)], [1, 2, 3, 4, 5, 6])
        rc, out, err = attnkit("eval", "--run", full)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 6 .*sequence_accuracy=")
        # Stop at 3, resume to 6: the same losses, bit for bit (dropout is on).
        part = os.path.join(self.dir, "part")
        self.train(part, "--run.steps", "3", "--schedule.kind", "constant")
        rc, _, err = attnkit("train", "--resume", part, "--run.steps", "6")
        self.assertEqual(rc, 0, err)
        self.assertEqual(losses(part), losses(full))
        # The run's model loads as an attnkit model directory.
        rc, out, err = attnkit("encode", "--model",
                               os.path.join(full, "checkpoints", "step-00000006", "model.safetensors"),
                               "--ids", "2 3 4 1")
        self.assertEqual(rc, 0, err)

    def test_config_file_and_overrides(self):
        cfg = os.path.join(self.dir, "run.toml")
        with open(cfg, "w") as f:
            f.write("[run]\nsteps = 2\n\n[model]\nhidden = 24\n\n[optimizer]\nlr = 0.002\n")
        run = os.path.join(self.dir, "run")
        # TINY says --model.hidden 16 and --model.layers 1; flags win over the file, a later flag
        # over an earlier one.
        self.train(run, "--config", cfg, "--model.layers", "2")
        with open(os.path.join(run, "config.toml")) as f:
            saved = f.read()
        for line in ("steps = 2", "hidden = 16", "layers = 2", "lr = 0.002"):
            self.assertIn(line + "\n", saved)
        with open(cfg, "a") as f:
            f.write("colour = 3\n")
        rc, _, err = attnkit("train", "--config", cfg, "--run.dir", os.path.join(self.dir, "bad"))
        self.assertNotEqual(rc, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("run.toml:9: optimizer.colour: unknown setting", err)

    def test_data_parallel_two_processes(self):
        run = os.path.join(self.dir, "ddp")
        rc, _, err = attnkit("train", "--nproc", "2", *TINY, "--run.dir", run, "--run.steps", "3")
        if not has_gloo():  # every worker refuses in one line, and the launcher says which failed
            self.assertNotEqual(rc, 0)
            self.assertIn("without c10d's Gloo backend", err)
            return
        self.assertEqual(rc, 0, err)
        self.assertEqual([s for s, _ in losses(run)], [1, 2, 3])

    def test_listops_files(self):
        data = os.path.join(self.dir, "listops")
        rc, _, err = attnkit("data", "listops", "--out", data, "--train", "40", "--val", "8", "--test", "8",
                             "--min-length", "10", "--max-length", "60")
        self.assertEqual(rc, 0, err)
        for split in ("train", "val", "test"):
            self.assertTrue(os.path.isfile(os.path.join(data, f"basic_{split}.tsv")))
        run = os.path.join(self.dir, "run")
        rc, out, err = attnkit("train", "--task.name", "listops", "--task.data", data, "--task.batch_size", "4",
                               "--model.hidden", "16", "--model.layers", "1", "--model.heads", "2",
                               "--run.steps", "2", "--run.dir", run)
        self.assertEqual(rc, 0, err)
        rc, out, err = attnkit("eval", "--run", run)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 2 split val accuracy=")
        # The test split reads basic_test.tsv, all of it with --examples 0.
        rc, out, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "0")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 2 split test accuracy=")
        # Per-example items (right or not, of 1): their accuracy is the printed one; a paired
        # bootstrap of the run against itself is level with a difference of 0.
        items = os.path.join(self.dir, "listops-items.json")
        rc, out, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "0", "--items", items)
        self.assertEqual(rc, 0, err)
        with open(items) as f:
            saved = json.load(f)
        self.assertEqual((saved["metric"], saved["width"], saved["items"]), ("accuracy", 2, 8))
        self.assertEqual(saved["values"][1::2], [1] * 8)
        self.assertTrue(all(v in (0, 1) for v in saved["values"][0::2]))
        self.assertAlmostEqual(sum(saved["values"][0::2]) / 8, metric(out, "accuracy"), places=6)
        paired = os.path.join(self.dir, "listops-paired.json")
        rc, out, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "0", "--paired-bs", items,
                               "--bs-samples", "100", "--json", paired)
        self.assertEqual(rc, 0, err)
        with open(paired) as f:
            result = json.load(f)
        self.assertEqual((result["metric"], result["difference"]["score"], result["verdict"]), ("accuracy", 0, "level"))
        # Any checkpoint by name; eval leaves the run directory as it was (a checkpoint being
        # written by a training process stays).
        pending = os.path.join(run, "checkpoints", ".tmp-pending")
        os.mkdir(pending)
        rc, out, err = attnkit("eval", "--run", run, "--checkpoint", "best")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 2 split val accuracy=")
        rc, out, err = attnkit("eval", "--run", run, "--checkpoint", "step-00000002")
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.isdir(pending))
        rc, out, err = attnkit("eval", "--run", run, "--checkpoint", "step-00000001")
        self.assertEqual(rc, 2)
        self.assertIn("step-00000001", err)
        os.remove(os.path.join(data, "basic_test.tsv"))
        rc, out, err = attnkit("eval", "--run", run, "--split", "test")
        self.assertEqual(rc, 2)
        self.assertIn("basic_test.tsv", err)
        # Generated tasks have no test files.
        copy_run = os.path.join(self.dir, "copy")
        rc, _, err = attnkit("train", *TINY, "--run.steps", "1", "--run.dir", copy_run)
        self.assertEqual(rc, 0, err)
        rc, _, err = attnkit("eval", "--run", copy_run, "--split", "test")
        self.assertEqual(rc, 2)
        self.assertIn("task.eval_split = test needs test files", err)

    def train_tiny_lm(self):
        """A 30-step lm run (checkpoints at steps 10, 20, 30) on a cycle of six words, with a test
        file of the reversed cycle; returns (run, test file)."""
        words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
        vocab = os.path.join(self.dir, "vocab.txt")
        with open(vocab, "w") as f:
            f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
        train, test = os.path.join(self.dir, "lm-train.txt"), os.path.join(self.dir, "lm-test.txt")
        with open(train, "w") as f:  # a cycle the model can learn
            f.write("\n".join(" ".join(words) for _ in range(200)) + "\n")
        with open(test, "w") as f:  # another order: a different, higher perplexity
            f.write("\n".join(" ".join(reversed(words)) for _ in range(40)) + "\n")
        run = os.path.join(self.dir, "lm")
        rc, _, err = attnkit("train", "--task.name", "lm", "--task.data", train, "--task.tokenizer", vocab,
                             "--task.truncate", "16", "--task.batch_size", "8", "--model.hidden", "16",
                             "--model.layers", "1", "--model.heads", "2", "--run.steps", "30",
                             "--optimizer.lr", "3e-3", "--run.checkpoint_every", "10", "--run.dir", run)
        self.assertEqual(rc, 0, err)
        return run, test

    def test_lm_test_split_reads_the_test_file(self):
        """`eval --split test` of an lm run: the blocks of the file named like task.data with
        'train' -> 'test', all of them with --examples 0, and not the validation blocks."""
        run, test = self.train_tiny_lm()
        rc, val, err = attnkit("eval", "--run", run)
        self.assertEqual(rc, 0, err)
        rc, out, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "0")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 30 split test ")
        self.assertGreater(metric(out, "perplexity"), 2 * metric(val, "perplexity"), (val, out))
        # The frequency baseline of the training targets (six words, equally frequent) scores both
        # splits alike: perplexity near 6, accuracy near 1/6. The model that learned the cycle
        # beats it on validation (accuracy 1 at step 30) and loses to it on the reversed cycle.
        for line in (val, out):
            self.assertGreater(metric(line, "unigram_perplexity"), 5, line)
            self.assertLess(metric(line, "unigram_perplexity"), 8, line)
            self.assertLess(metric(line, "unigram_accuracy"), 0.3, line)
        self.assertGreater(metric(val, "token_accuracy"), 0.9, val)
        self.assertGreater(metric(out, "perplexity"), metric(out, "unigram_perplexity"), out)
        # 40 lines of 6 words (and the line ends) in blocks of 16 tokens, every block: more than
        # the validation's every 20th block of the training file.
        rc, few, err = attnkit("eval", "--run", run, "--split", "test", "--examples", "2")
        self.assertEqual(rc, 0, err)
        self.assertNotEqual(few, out)
        os.remove(test)
        rc, _, err = attnkit("eval", "--run", run, "--split", "test")
        self.assertEqual(rc, 2)
        self.assertIn("lm-test.txt", err)

    def test_eval_init_scores_the_starting_model(self):
        """`eval --checkpoint init` scores the run's model.init untrained: for a run fine-tuned from
        another run's step-30 model, the same test perplexity as that checkpoint in its own run (and
        not the fine-tuned one's); a run trained from scratch has no init (a one-line error)."""
        run, _ = self.train_tiny_lm()
        base = ["--split", "test", "--examples", "0"]
        rc, start, err = attnkit("eval", "--run", run, "--checkpoint", "step-00000030", *base)
        self.assertEqual(rc, 0, err)
        rc, _, err = attnkit("eval", "--run", run, "--checkpoint", "init", *base)
        self.assertEqual(rc, 2)
        self.assertIn("--checkpoint init: run %s has no model.init" % run, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        model = os.path.join(self.dir, "lm-30")
        rc, _, err = attnkit("convert", "--from", os.path.join(run, "checkpoints", "step-00000030"), "--to", model)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(run, "config.toml")) as f:
            config = f.read()
        data = {k: re.search(r'^%s = "([^"]*)"' % k, config, re.M).group(1) for k in ("data", "tokenizer")}
        tuned = os.path.join(self.dir, "lm-tuned")
        rc, _, err = attnkit("train", "--init", model, "--task.name", "lm", "--task.data", data["data"],
                             "--task.tokenizer", data["tokenizer"], "--task.truncate", "16", "--task.batch_size", "8",
                             "--run.steps", "10", "--optimizer.lr", "3e-2", "--run.dir", tuned)
        self.assertEqual(rc, 0, err)
        rc, init, err = attnkit("eval", "--run", tuned, "--checkpoint", "init", *base)
        self.assertEqual(rc, 0, err)
        self.assertRegex(init, r"^step 0 split test ")
        self.assertAlmostEqual(metric(init, "perplexity"), metric(start, "perplexity"),
                               delta=1e-4 * metric(start, "perplexity"))
        rc, newest, err = attnkit("eval", "--run", tuned, *base)
        self.assertEqual(rc, 0, err)
        self.assertNotAlmostEqual(metric(newest, "perplexity"), metric(init, "perplexity"), places=3)

    def test_eval_int8_against_float32(self):
        """`eval --compute-type int8` evaluates the checkpoint quantized as generate quantizes it:
        a perplexity near float32's but not the same number, its line says so, and --paired-bs
        against the float32 items gives what int8 costs; bf16 is refused (no quantized eval)."""
        run, _ = self.train_tiny_lm()
        base = ["eval", "--run", run, "--split", "test", "--examples", "0"]
        items = os.path.join(self.dir, "items-float.json")
        rc, out, err = attnkit(*base, "--items", items)
        self.assertEqual(rc, 0, err)
        self.assertNotIn("compute", out)
        paired = os.path.join(self.dir, "paired-int8.json")
        rc, out8, err = attnkit(*base, "--compute-type", "int8", "--paired-bs", items, "--bs-samples", "100",
                                "--json", paired)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out8, r"^step 30 split test compute int8 ")
        float_ppl, int8_ppl = metric(out, "perplexity"), metric(out8, "perplexity")
        self.assertNotEqual(int8_ppl, float_ppl)
        self.assertLess(abs(int8_ppl / float_ppl - 1), 0.05, (out, out8))
        with open(paired) as f:
            result = json.load(f)
        self.assertAlmostEqual(result["a"]["score"], int8_ppl, delta=1e-4 * int8_ppl)
        self.assertAlmostEqual(result["b"]["score"], float_ppl, delta=1e-4 * float_ppl)
        rc, _, err = attnkit(*base, "--compute-type", "bf16")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("--compute-type: bf16 not in {float32,int8}", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_eval_items_and_paired_bootstrap(self):
        """`eval --items` writes each test block's negative log-likelihood and tokens (their corpus
        perplexity is the one printed); `--paired-bs` of another checkpoint against them gives the
        paired bootstrap (difference = system - baseline, verdict from its interval), of the same
        checkpoint a difference of exactly 0 and "level"; bad baselines and tasks without items
        are one-line errors."""
        run, _ = self.train_tiny_lm()
        base = ["eval", "--run", run, "--split", "test", "--examples", "0"]
        items = os.path.join(self.dir, "items-30.json")
        rc, out, err = attnkit(*base, "--items", items)
        self.assertEqual(rc, 0, err)
        with open(items) as f:
            saved = json.load(f)
        self.assertEqual((saved["metric"], saved["width"], saved["step"], saved["split"]),
                         ("perplexity", 2, 30, "test"))
        nll, tokens = saved["values"][0::2], saved["values"][1::2]
        self.assertEqual(saved["items"], len(tokens))
        self.assertGreater(len(tokens), 10)
        self.assertTrue(all(t > 0 for t in tokens) and all(v >= 0 for v in nll))
        perplexity = metric(out, "perplexity")
        self.assertAlmostEqual(math.exp(sum(nll) / sum(tokens)) / perplexity, 1.0, delta=1e-5)

        paired = os.path.join(self.dir, "paired.json")
        rc, out10, err = attnkit(*base, "--checkpoint", "step-00000010", "--paired-bs", items,
                                 "--bs-samples", "200", "--json", paired)
        self.assertEqual(rc, 0, err)
        self.assertIn("paired bootstrap, perplexity over %d items (200 resamples" % len(tokens), out10)
        with open(paired) as f:
            result = json.load(f)
        self.assertAlmostEqual(result["a"]["score"], metric(out10, "perplexity"), delta=1e-4 * perplexity)
        self.assertAlmostEqual(result["b"]["score"], perplexity, delta=1e-4 * perplexity)
        difference = result["difference"]
        self.assertAlmostEqual(difference["score"], result["a"]["score"] - result["b"]["score"], places=9)
        self.assertLessEqual(difference["low"], difference["high"])
        expected = "b" if difference["low"] > 0 else "a" if difference["high"] < 0 else "level"
        self.assertEqual(result["verdict"], expected)  # lower perplexity is better

        # `compare` of the two stored evaluations (no model) gives the same numbers, bit for bit.
        items10, compared = os.path.join(self.dir, "items-10.json"), os.path.join(self.dir, "compared.json")
        rc, _, err = attnkit(*base, "--checkpoint", "step-00000010", "--items", items10)
        self.assertEqual(rc, 0, err)
        rc, out, err = attnkit("compare", items10, items, "--bs-samples", "200", "--json", compared)
        self.assertEqual(rc, 0, err)
        self.assertIn("A - B", out)
        with open(compared) as f:
            got = json.load(f)
        for key in ("metric", "items", "samples", "difference", "p_value", "verdict"):
            self.assertEqual(got[key], result[key], key)
        self.assertEqual((got["a"]["score"], got["b"]["score"]), (result["a"]["score"], result["b"]["score"]))

        rc, out, err = attnkit(*base, "--paired-bs", items, "--bs-samples", "50", "--json", paired)
        self.assertEqual(rc, 0, err)
        with open(paired) as f:
            result = json.load(f)
        self.assertEqual((result["difference"]["low"], result["difference"]["high"], result["verdict"]),
                         (0.0, 0.0, "level"))

        bad = os.path.join(self.dir, "bad.json")
        for content, message in (("{", "not JSON"), ('{"metric": "perplexity", "width": 2, "values": [1, 2, 3]}',
                                                     "not a positive multiple of width 2"),
                                 ('{"metric": "perplexity", "width": 2, "values": [1, 0]}', "tokens > 0"),
                                 ('{"metric": "loss", "width": 2, "values": [1, 2]}', "none of bleu")):
            with open(bad, "w") as f:
                f.write(content)
            rc, _, err = attnkit(*base, "--paired-bs", bad)
            self.assertEqual(rc, 2, err)
            self.assertIn(message, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
        rc, _, err = attnkit(*base, "--checkpoint", "step-00000010", "--paired-bs", items[:-5] + "-none.json")
        self.assertEqual(rc, 2)
        self.assertIn("items-30-none.json", err)
        # Items of other data: another split named in the file, or other token counts per item.
        with open(items) as f:
            other = json.load(f)
        for change, message in ((("split", "val"), "items of the \"val\" split"),
                                (("values", [v + (1 if i == 1 else 0) for i, v in enumerate(other["values"])]),
                                 "item 0 counts")):
            with open(bad, "w") as f:
                json.dump(dict(other, **{change[0]: change[1]}), f)
            rc, _, err = attnkit(*base, "--paired-bs", bad)
            self.assertEqual(rc, 2, err)
            self.assertIn(message, err)
            rc, _, err = attnkit("compare", items, bad)
            self.assertEqual(rc, 2, err)
            self.assertIn("of the \"val\" split" if change[0] == "split" else "item 0 counts", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
        rc, _, err = attnkit(*base, "--json", paired)
        self.assertNotEqual(rc, 0)
        self.assertIn("--json requires --paired-bs", err)

        copy_run = os.path.join(self.dir, "copy")
        rc, _, err = attnkit("train", *TINY, "--run.steps", "3", "--run.dir", copy_run)
        self.assertEqual(rc, 0, err)
        rc, _, err = attnkit("eval", "--run", copy_run, "--items", os.path.join(self.dir, "copy-items.json"))
        self.assertEqual(rc, 2)
        self.assertIn("task 'copy' gives no per-item statistics", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "copy-items.json")))


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
