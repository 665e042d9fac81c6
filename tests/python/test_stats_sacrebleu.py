#!/usr/bin/python3
"""`attnkit bleu --paired-bs` (metrics/stats.h) against sacreBLEU 2.x's paired bootstrap
(`sacrebleu REF -i BASELINE SYSTEM --paired-bs`, sacrebleu/significance.py) on generated systems.

attnkit reproduces numpy's default_rng(seed).choice, so both draw the same resamples: the corpus
BLEU, each system's bootstrap mean and "± ci", the p-value and the interval endpoints (order
statistics n/40 and n-1-n/40 of the resampled scores, taken here from sacreBLEU's own
_bootstrap_resample) must agree to 1e-6 BLEU points: only float rounding differs (sacreBLEU sums
float32 counts, exact for these sizes, and prints percentages). Runs in the test venv, which has
sacrebleu."""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

runner.run_in_peer_venv("sacrebleu")
import numpy as np  # noqa: E402
from sacrebleu.metrics import BLEU  # noqa: E402
from sacrebleu import significance  # noqa: E402
from test_bleu_sacrebleu import perturb, sentence  # noqa: E402  (the generated corpora of the BLEU peer)

BUILD_DIR = "build"
TOLERANCE = 1e-6  # BLEU points


def systems(seed, size):
    rng = random.Random(seed)
    references = [sentence(rng, rng.randrange(3, 25)) for _ in range(size)]
    good = [perturb(rng, r) for r in references]
    worse = [perturb(rng, perturb(rng, r)) for r in references]
    other = [perturb(rng, r) for r in references]  # as good as `good`
    return references, good, worse, other


def attnkit_paired(directory, system, baseline, references, samples, seed):
    def write(name, lines):
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
        return path
    out = os.path.join(directory, "bs.json")
    argv = [os.path.join(BUILD_DIR, "attnkit"), "bleu", "--hyp", write("sys.txt", system), "--ref",
            write("ref.txt", references), "--paired-bs", write("base.txt", baseline), "--bs-samples",
            str(samples), "--bs-seed", str(seed), "--json", out]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    with open(out, encoding="utf-8") as f:
        return json.load(f), p.stdout


def sacrebleu_paired(system, baseline, references, samples, seed):
    """sacreBLEU's PairedTest (the --paired-bs code path) and, from its own resampling function,
    the resampled scores of both systems."""
    os.environ["SACREBLEU_SEED"] = str(seed)
    metric = BLEU(references=[references])
    test = significance.PairedTest([("baseline", baseline), ("system", system)], {"BLEU": metric},
                                   references=None, test_type="bs", n_samples=samples)
    _, results = test()
    base_result, system_result = results["BLEU"]
    resampled = {}
    for name, hyps in (("baseline", baseline), ("system", system)):
        stats = metric._extract_corpus_statistics(hyps, None)
        _, scores = significance._bootstrap_resample(stats, metric, samples)
        resampled[name] = np.array([s.score for s in scores])
    return base_result, system_result, resampled


class PairedBootstrapPeer(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, system, baseline, references, samples, seed):
        got, stdout = attnkit_paired(self.tmp.name, system, baseline, references, samples, seed)
        base, sys_, resampled = sacrebleu_paired(system, baseline, references, samples, seed)
        lower = samples // 40
        upper = samples - lower - 1

        def endpoints(scores):
            s = np.sort(scores)
            return s[lower], s[upper]

        for name, result in (("a", sys_), ("b", base)):
            mine = got[name]
            self.assertAlmostEqual(100 * mine["score"], result.score, delta=TOLERANCE)
            self.assertAlmostEqual(100 * mine["mean"], result.mean, delta=TOLERANCE)
            self.assertAlmostEqual(100 * mine["half_width"], result.ci, delta=TOLERANCE)
            low, high = endpoints(resampled["system" if name == "a" else "baseline"])
            self.assertAlmostEqual(100 * mine["low"], low, delta=TOLERANCE)
            self.assertAlmostEqual(100 * mine["high"], high, delta=TOLERANCE)
        self.assertAlmostEqual(got["p_value"], sys_.p_value, delta=1e-12)
        low, high = endpoints(resampled["system"] - resampled["baseline"])
        self.assertAlmostEqual(100 * got["difference"]["low"], low, delta=TOLERANCE)
        self.assertAlmostEqual(100 * got["difference"]["high"], high, delta=TOLERANCE)
        self.assertAlmostEqual(100 * got["difference"]["score"], sys_.score - base.score, delta=TOLERANCE)
        if low > 0:
            want = "system beats baseline"
        elif high < 0:
            want = "baseline beats system"
        else:
            want = "level"
        self.assertEqual(got["verdict_text"], want)
        self.assertIn(want, stdout)
        return got

    def test_better_system_beats_baseline(self):
        references, good, worse, _ = systems(11, 400)
        got = self.check(good, worse, references, 1000, 12345)
        self.assertEqual(got["verdict"], "a")
        got = self.check(worse, good, references, 1000, 12345)
        self.assertEqual(got["verdict"], "b")

    def test_equal_quality_is_level(self):
        references, good, _, other = systems(5, 150)
        got = self.check(good, other, references, 1000, 12345)
        self.assertEqual(got["verdict"], "level")

    def test_other_seed_and_sample_count(self):
        references, good, worse, _ = systems(3, 60)
        self.check(good, worse, references, 123, 7)
        self.check(good, good, references, 200, 2 ** 33 + 5)  # identical systems: zero difference


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
