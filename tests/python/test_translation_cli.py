#!/usr/bin/python3
"""attnkit data parallel / train --task.name translation / eval / bleu on the command line: a user
TSV of pairs is checked (one-line errors naming file and line, nothing written) and split in file
order; a tiny translation run writes a run directory that `eval` scores with BLEU and chrF.
`analyze heads` on a translation run (Michel et al.'s experiment on an encoder-decoder): a tiny run
is scored at its three attention sites; heads.json holds the sites, a (site, layer) row per table,
per-head ablations and the three profiles with the heads masked per site, all under the BLEU of
greedy decodes; a bad pairs file is a one-line error naming file and line."""
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


VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nred\nbig\nold\ncat\ndog\nbird\nrojo\ngrande\nviejo\ngato\nperro\nave\n"


class TranslationCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def train_toy(self, train, val, test, *flags):
        """Writes toy_{train,val,test}.tsv (that many toy pairs, in that order) and a word vocabulary,
        trains a translation run on them with `flags`; returns (run directory, validation file)."""
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        write(os.path.join(data, "toy_train.tsv"), toy_pairs(train, 0))
        val_path = write(os.path.join(data, "toy_val.tsv"), toy_pairs(val, train))
        if test:
            write(os.path.join(data, "toy_test.tsv"), toy_pairs(test, train + val))
        vocab = write(os.path.join(self.dir, "vocab.txt"), VOCAB)
        run = os.path.join(self.dir, "run")
        rc, _, err = attnkit("--quiet", "train", "--task.name", "translation", "--task.data",
                             os.path.join(data, "toy_train.tsv"), "--task.tokenizer", vocab, "--task.truncate", "8",
                             *flags, "--run.dir", run)
        self.assertEqual(rc, 0, err)
        return run, val_path

    def test_fine_tuning_starts_from_model_init(self):
        # A translation run fine-tunes an encoder-decoder given as model.init (e.g. a linearized
        # student): every weight loaded, so its first training loss is the trained model's, far below
        # a fresh model's of the same shape; a decoder-only init is a one-line error.
        shape = ["--model.hidden", "32", "--model.layers", "2", "--model.heads", "4", "--model.pre_ln", "true",
                 "--model.dropout", "0"]
        run, _ = self.train_toy(60, 20, 0, "--task.batch_size", "8", *shape, "--optimizer.lr", "1e-3",
                                "--schedule.warmup", "20", "--run.steps", "300")
        data, vocab = os.path.join(self.dir, "data", "toy_train.tsv"), os.path.join(self.dir, "vocab.txt")

        def first_loss(name, *flags):
            out = os.path.join(self.dir, name)
            rc, _, err = attnkit("--quiet", "train", "--task.name", "translation", "--task.data", data,
                                 "--task.tokenizer", vocab, "--task.truncate", "8", "--task.batch_size", "8",
                                 "--run.steps", "3", "--run.log_every", "1", "--run.dir", out, *flags)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "metrics.jsonl")) as f:
                losses = [json.loads(line)["loss"] for line in f if '"loss"' in line and '"eval"' not in line]
            return losses[0], err
        tuned, err = first_loss("tuned", "--model.init", run)
        self.assertIn("init: the encoder-decoder of", err)
        fresh, _ = first_loss("fresh", *shape)
        self.assertLess(tuned, fresh - 1.0, (tuned, fresh))
        lm = os.path.join(self.dir, "lm")
        rc, _, err = attnkit("--quiet", "train", "--task.name", "lm", "--task.data", data, "--task.tokenizer", vocab,
                             "--task.truncate", "8", "--model.hidden", "16", "--model.layers", "1", "--model.heads",
                             "2", "--run.steps", "1", "--run.dir", lm)
        self.assertEqual(rc, 0, err)
        rc, _, err = attnkit("--quiet", "train", "--task.name", "translation", "--task.data", data,
                             "--task.tokenizer", vocab, "--task.truncate", "8", "--model.init", lm,
                             "--run.steps", "1", "--run.dir", os.path.join(self.dir, "bad"))
        self.assertNotEqual(rc, 0)
        self.assertIn("needs an encoder-decoder", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_user_pairs_are_checked_and_split(self):
        out = os.path.join(self.dir, "out")
        for name, content, where in [("tab.tsv", b"a\tb\nno tab\n", ":2: expected 2 tab-separated columns, got 1"),
                                     ("empty.tsv", b"a\tb\n \tb\n", ":2: empty source"),
                                     ("utf8.tsv", b"a\tb\nc\t\xff\n", ":2: invalid UTF-8")]:
            path = write(os.path.join(self.dir, name), content, "wb")
            rc, _, err = attnkit("data", "parallel", "--pairs", path, "--out", out)
            self.assertNotEqual(rc, 0)
            self.assertIn(path + where, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertFalse(os.path.exists(out))
        path = write(os.path.join(self.dir, "pairs.tsv"), toy_pairs(100, 0))
        rc, _, err = attnkit("--quiet", "data", "parallel", "--pairs", path, "--out", out,
                             "--val-fraction", "0.1", "--test-fraction", "0.2")
        self.assertEqual(rc, 0, err)
        lines = {s: open(os.path.join(out, f"{s}.tsv")).read().splitlines() for s in ("train", "val", "test")}
        self.assertEqual([len(lines[s]) for s in ("train", "val", "test")], [70, 10, 20])
        self.assertEqual(lines["test"][-1] + "\n", toy_pairs(1, 99))

    def test_near_duplicates_are_measured_and_dropped(self):
        # 30 distinct sources, then 5 held-out ones that repeat training ones (other case and
        # punctuation) or share 5 of their 6 word 4-grams with one.
        def source(i):
            return " ".join(f"{c}{i}" for c in "abcdefgh")  # 8 words, 5 4-grams
        lines = [f"{source(i)}\tt{i}\n" for i in range(35)]
        for k, i in enumerate(range(30, 35)):
            lines[i] = f"{source(k).upper().replace(' ', ', ', 1)}!\tt\n" if k % 2 else f"{source(k)} new\tt\n"
        path = write(os.path.join(self.dir, "dups.tsv"), "".join(lines))
        for flags, dropped in [((), 0), (("--near-duplicate-threshold", "0.5"), 5)]:
            out = os.path.join(self.dir, f"dups{dropped}")
            rc, _, err = attnkit("--quiet", "data", "parallel", "--pairs", path, "--out", out,
                                 "--val-fraction", "0.1", "--test-fraction", "0.2", *flags)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "split.json")) as f:
                report = json.load(f)
            before = report["overlap_before_filter"]["test"]
            self.assertEqual((before["pairs"], before["at_least_50"], before["at_least_80"], before["exact_repeats"]),
                             (7, 5, 5, 2))
            self.assertEqual(report["dropped"]["test"], dropped)
            self.assertEqual(report["overlap"]["test"]["at_least_50"], 5 - dropped)
            self.assertEqual(len(open(os.path.join(out, "test.tsv")).read().splitlines()), 7 - dropped)

    def test_train_eval_and_bleu(self):
        run, _ = self.train_toy(60, 20, 1, "--task.batch_size", "8", "--task.beams", "2",
                                "--task.label_smoothing", "0.1", "--model.hidden", "32", "--model.layers", "2",
                                "--model.heads", "2", "--model.pre_ln", "true", "--model.dropout", "0",
                                "--optimizer.lr", "1e-3", "--schedule.warmup", "20", "--run.steps", "300")
        self.assertTrue(os.path.isfile(os.path.join(run, "checkpoints", "best", "model.safetensors")))
        # `attnkit generate` translates with the run's best checkpoint (the padding token starts
        # the decoder, [SEP] ends it) a training sentence it has learnt (200 steps sufficed).
        rc, out, err = attnkit("--quiet", "generate", "--model", run, "--prompt", "big dog old cat")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "perro grande gato viejo")
        # --sources FILE is --prompts FILE under the translator's name: one translation per line.
        sources = write(os.path.join(self.dir, "sources.txt"), "big dog old cat\nbig dog old cat\n")
        rc, out, err = attnkit("--quiet", "generate", "--model", run, "--sources", sources)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), ["perro grande gato viejo"] * 2)  # the translation alone
        rc, out, err = attnkit("eval", "--run", run, "--split", "test")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^step 300 split test bleu=\S+ chrf=\S+ loss=")
        ref = write(os.path.join(self.dir, "ref.txt"), "El niño, 1,000.5 pesos.\nOtra línea\n")
        rc, out, err = attnkit("bleu", "--hyp", ref, "--ref", ref)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), [
            "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 8 ref_len = 8)",  # sacrebleu 2.5.1 prints this
            "chrF2 = 100.00"])
        short = write(os.path.join(self.dir, "short.txt"), "one line\n")
        rc, _, err = attnkit("bleu", "--hyp", short, "--ref", ref)
        self.assertNotEqual(rc, 0)
        self.assertIn("has 2 lines but", err)

    def test_analyze_heads_on_a_translation_run(self):
        run, val = self.train_toy(60, 12, 0, "--task.batch_size", "8", "--model.hidden", "16", "--model.layers", "2",
                                  "--model.heads", "2", "--model.pre_ln", "true", "--model.dropout", "0",
                                  "--optimizer.lr", "1e-3", "--schedule.warmup", "10", "--run.steps", "40")
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
        run, _ = self.train_toy(16, 4, 0, "--task.batch_size", "4", "--model.hidden", "8", "--model.layers", "1",
                                "--model.heads", "2", "--run.steps", "2")
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
