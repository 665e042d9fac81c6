#!/usr/bin/python3
"""`attnkit bleu` against the sacrebleu package (2.x, default BLEU and chrF settings) on generated
hypothesis/reference sets: punctuation, numbers with commas and periods, hyphens, entities,
non-ASCII text, empty hypotheses, several references. BLEU and chrF must agree within 0.01 and
the lengths exactly. Runs in the test venv (scripts/peer_python.sh), which has sacrebleu."""
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

runner.run_in_peer_venv("sacrebleu")
import sacrebleu  # noqa: E402
from sacrebleu.metrics import BLEU, CHRF  # noqa: E402

BUILD_DIR = "build"

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "día", "niño", "über", "naïve", "café", "東京",
         "Jesus", "said", "don't", "well-known", "U.S.A.", "e.g.", "1,000", "3.14", "1,000.50", "$5",
         "3-4", "(see", "above)", "a", "b", "c", "x", "y", "z", "“quoted”", "‘single’", "…", "—", "&amp;",
         "&lt;tag&gt;", "&quot;", "<skipped>", "100%", "#1", "@home", "a/b", "[1]", "{x}", "~", "^", "_"]
ENDINGS = ["", ".", "!", "?", ",", ";", ":", "...", " .", "\u00a0", "  ", "\t"]


def sentence(rng, n):
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words) + rng.choice(ENDINGS)


def perturb(rng, ref):
    words = ref.split()
    out = [w for w in words if rng.random() > 0.2]
    for _ in range(rng.randrange(3)):
        out.insert(rng.randrange(len(out) + 1), rng.choice(WORDS))
    if rng.random() < 0.3 and len(out) > 2:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out) + rng.choice(ENDINGS)


def corpus(seed, size, refs):
    rng = random.Random(seed)
    references = [[sentence(rng, rng.randrange(1, 25)) for _ in range(size)] for _ in range(refs)]
    hypotheses = []
    for i in range(size):
        r = rng.random()
        if r < 0.08:
            hypotheses.append("")  # empty hypothesis
        elif r < 0.12:
            hypotheses.append(sentence(rng, rng.randrange(1, 4)))  # unrelated, short
        else:
            hypotheses.append(perturb(rng, references[0][i]))
    return hypotheses, references


def attnkit_bleu(directory, hypotheses, references):
    def write(name, lines):
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
        return path
    argv = [os.path.join(BUILD_DIR, "attnkit"), "bleu", "--hyp", write("hyp.txt", hypotheses)]
    for k, refs in enumerate(references):
        argv += ["--ref", write(f"ref{k}.txt", refs)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    return p.stdout.splitlines()


class SacreBleuPeer(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, hypotheses, references):
        bleu_line, chrf_line = attnkit_bleu(self.tmp.name, hypotheses, references)
        want_bleu = BLEU().corpus_score(hypotheses, references)
        want_chrf = CHRF().corpus_score(hypotheses, references)
        got = re.match(r"BLEU = ([0-9.]+) .*hyp_len = (\d+) ref_len = (\d+)\)$", bleu_line)
        self.assertIsNotNone(got, bleu_line)
        self.assertAlmostEqual(float(got.group(1)), want_bleu.score, delta=0.01, msg=f"{bleu_line} vs {want_bleu}")
        self.assertEqual((int(got.group(2)), int(got.group(3))), (want_bleu.sys_len, want_bleu.ref_len))
        self.assertEqual(bleu_line, str(want_bleu))  # the whole score string, precisions included
        got_chrf = re.match(r"chrF2 = ([0-9.]+)$", chrf_line)
        self.assertIsNotNone(got_chrf, chrf_line)
        self.assertAlmostEqual(float(got_chrf.group(1)), want_chrf.score, delta=0.01, msg=f"{chrf_line} vs {want_chrf}")

    def test_generated_corpora(self):
        for seed, size, refs in [(1, 300, 1), (3, 120, 2), (4, 30, 3)]:
            with self.subTest(seed=seed):
                self.check(*corpus(seed, size, refs))

    def test_edge_cases(self):
        self.check(["", "", ""], [["a b c", "d e", "f"]])                       # all empty: 0
        self.check(["a b c"], [["a b c"]])                                     # no 4-gram: 0
        self.check(["x y z w"], [["a b c d"]])                                  # no match
        self.check(["It costs $1,000.50 (approx.)!"], [["It costs $1,000.50, approx."]])
        self.check(["El niño está aquí, ¿verdad?"], [["El niño está aquí; ¿verdad?"]])
        self.check(["The U.S.A. has 3-4 well-known e.g. cases."], [["The U.S.A. has 3 - 4 known cases ."]])
        self.check(["same words here in order"] * 3, [["same words here in order"] * 3])

    def test_translation_like_bible_text(self):
        refs = ["En el principio creó Dios los cielos y la tierra.",
                "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la haz del abismo.",
                "Y dijo Dios: Sea la luz: y fué la luz."]
        hyps = ["En el principio Dios creó los cielos y la tierra.",
                "La tierra estaba desordenada y vacía; y tinieblas sobre el abismo.",
                "Y dijo Dios: Sea la luz, y fue la luz."]
        self.check(hyps, [refs])


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
