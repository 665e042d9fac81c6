#!/usr/bin/python3
"""attnkit analyze heads on a translation run (Michel et al.'s experiment on an encoder-decoder):
a tiny run trained by `train --task.name translation` on a toy pairs file is scored at its three
attention sites; heads.json holds the sites, a (site, layer) row per table, per-head ablations and
the three profiles with the heads masked per site, all under the BLEU of greedy decodes; a bad
pairs file is a one-line error naming file and line."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

BUILD_DIR = "build"


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


def toy_pairs(count, offset):
    words = [("red", "rojo"), ("big", "grande"), ("old", "viejo")]
    nouns = [("cat", "gato"), ("dog", "perro"), ("bird", "ave")]
    lines = []
    for i in range(offset, offset + count):
        (a, b), (n, m) = words[i % 3], nouns[(i // 3) % 3]
        (a2, b2), (n2, m2) = words[(i // 9) % 3], nouns[(i // 27) % 3]
        lines.append(f"{a} {n} {a2} {n2}\t{m} {b} {m2} {b2}\n")
    return "".join(lines)


class TranslationHeadsCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_analyze_heads_on_a_translation_run(self):
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        write(os.path.join(data, "toy_train.tsv"), toy_pairs(60, 0))
        val = write(os.path.join(data, "toy_val.tsv"), toy_pairs(12, 60))
        vocab = write(os.path.join(self.dir, "vocab.txt"),
                      "[PAD]\n[UNK]\n[CLS]\n[SEP]\nred\nbig\nold\ncat\ndog\nbird\nrojo\ngrande\nviejo\ngato\nperro\nave\n")
        run = os.path.join(self.dir, "run")
        rc, _, err = attnkit("--quiet", "train", "--task.name", "translation", "--task.data",
                             os.path.join(data, "toy_train.tsv"), "--task.tokenizer", vocab, "--task.truncate", "8",
                             "--task.batch_size", "8", "--model.hidden", "16", "--model.layers", "2",
                             "--model.heads", "2", "--model.pre_ln", "true", "--model.dropout", "0",
                             "--optimizer.lr", "1e-3", "--schedule.warmup", "10", "--run.steps", "40",
                             "--run.dir", run)
        self.assertEqual(rc, 0, err)
        out = os.path.join(self.dir, "heads")
        rc, stdout, err = attnkit("analyze", "heads", "--model", run, "--data", val, "--out", out,
                                  "--fractions", "25,50,100")
        self.assertEqual(rc, 0, err)
        self.assertRegex(stdout, r"bleu baseline \d\.\d{4} \(loss \d+\.\d{4}")
        with open(os.path.join(out, "heads.json")) as f:
            heads = json.load(f)
        self.assertEqual(heads["metric"], "bleu")
        self.assertEqual([s["name"] for s in heads["sites"]], ["encoder.self", "decoder.self", "decoder.cross"])
        self.assertEqual([s["layers"] for s in heads["sites"]], [2, 2, 2])
        table = heads["importance"]["importance"]
        self.assertEqual([len(row) for row in table], [2] * 6)
        for row in table:  # normalised per (site, layer)
            self.assertAlmostEqual(sum(v * v for v in row), 1.0, places=6)
        baseline = heads["ablation"]["baseline"]
        self.assertGreaterEqual(baseline, 0.0)
        self.assertLessEqual(baseline, 1.0)
        self.assertEqual([len(row) for row in heads["ablation"]["single"]], [2] * 6)
        self.assertEqual([len(row) for row in heads["ablation"]["all_but_one"]], [2] * 6)
        self.assertEqual([p["order"] for p in heads["profiles"]], ["importance", "random", "reverse"])
        for profile in heads["profiles"]:
            self.assertEqual([round(s["fraction"], 2) for s in profile["steps"]], [0.0, 0.25, 0.5, 0.5])
            self.assertAlmostEqual(profile["steps"][0]["metric"], baseline, places=12)
            for step in profile["steps"]:
                self.assertEqual(sorted(step["pruned_by_site"]), ["decoder.cross", "decoder.self", "encoder.self"])
                self.assertEqual(sum(step["pruned_by_site"].values()), step["pruned"])
        self.assertGreater(heads["baseline_loss"], 0.0)

    def test_bad_pairs_file_is_one_line(self):
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        write(os.path.join(data, "toy_train.tsv"), toy_pairs(16, 0))
        vocab = write(os.path.join(self.dir, "vocab.txt"),
                      "[PAD]\n[UNK]\n[CLS]\n[SEP]\nred\nbig\nold\ncat\ndog\nbird\nrojo\ngrande\nviejo\ngato\nperro\nave\n")
        write(os.path.join(data, "toy_val.tsv"), toy_pairs(4, 16))
        run = os.path.join(self.dir, "run")
        rc, _, err = attnkit("--quiet", "train", "--task.name", "translation", "--task.data",
                             os.path.join(data, "toy_train.tsv"), "--task.tokenizer", vocab, "--task.truncate", "8",
                             "--task.batch_size", "4", "--model.hidden", "8", "--model.layers", "1",
                             "--model.heads", "2", "--run.steps", "2", "--run.dir", run)
        self.assertEqual(rc, 0, err)
        bad = write(os.path.join(self.dir, "bad.tsv"), "red cat\trojo gato\nno tab here\n")
        out = os.path.join(self.dir, "heads")
        rc, _, err = attnkit("analyze", "heads", "--model", run, "--data", bad, "--out", out)
        self.assertNotEqual(rc, 0)
        self.assertIn(bad + ":2:", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertFalse(os.path.exists(os.path.join(out, "heads.json")))


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
