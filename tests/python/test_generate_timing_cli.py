#!/usr/bin/python3
"""attnkit generate --json's "timing" (issue 43 part 4): the times the process measures itself
(load, prompts, prefill, decoding, total; the CPU seconds beside them) and the token counts, on
the tiny random GPT-2 of test_generate_hf.py (made by transformers). Every time is a number >= 0,
the parts add up to at most total_s, and total_s to at most the wall time of the whole process
measured outside it; the counts are those of the JSON's own ids; with --max-new-tokens 0 no
forward runs, so prefill and decoding are 0. (--json always times; that the timed session
leaves the ids alone is test_generate_hf.py's check, which compares --json's ids with
transformers'.)"""
import json
import os
import subprocess
import tempfile
import time
import unittest

import runner

runner.run_in_peer_venv("transformers")

from test_generate_hf import make_model_dir  # noqa: E402

BUILD_DIR = "build"
PARTS = ("load_s", "prompts_s", "prefill_s", "decode_s")
FIELDS = PARTS + ("total_s", "load_cpu_s", "prefill_cpu_s", "decode_cpu_s", "prompt_tokens",
                  "new_tokens", "decode_steps")


class GenerateTiming(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "gpt2")
        make_model_dir(cls.dir, seed=2)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def generate(self, *args):
        """-> (the JSON document, the process's wall seconds measured here)."""
        argv = [os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "generate", "--model", self.dir,
                "--json", *args]
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        wall = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout), wall

    def check_times(self, doc, wall):
        timing = doc["timing"]
        self.assertEqual(sorted(timing), sorted(FIELDS))
        for key in FIELDS:
            self.assertIsInstance(timing[key], (int, float), key)
            self.assertGreaterEqual(timing[key], 0, key)
        for key in ("prompt_tokens", "new_tokens", "decode_steps"):
            self.assertIsInstance(timing[key], int, key)
        self.assertLessEqual(sum(timing[k] for k in PARTS), timing["total_s"] + 1e-6)
        self.assertLessEqual(timing["total_s"], wall)
        self.assertGreater(timing["load_s"], 0)
        results = doc["results"]
        self.assertEqual(timing["prompt_tokens"], sum(len(r["prompt_ids"]) for r in results))
        self.assertEqual(timing["new_tokens"],
                         sum(len(s["ids"]) for r in results for s in r["sequences"]))
        return timing

    def test_greedy_batch(self):
        doc, wall = self.generate("--prompt", "the cat sat", "--prompt", "a", "--no-eos",
                                  "--max-new-tokens", "6")
        timing = self.check_times(doc, wall)
        self.assertEqual(timing["new_tokens"], 12)
        self.assertEqual(timing["decode_steps"], 5)  # the prefill's forward gives the first token
        self.assertGreater(timing["prefill_s"], 0)
        self.assertGreater(timing["decode_s"], 0)

    def test_beam(self):
        doc, wall = self.generate("--prompt", "the cat", "--strategy", "beam", "--beams", "3",
                                  "--num-return-sequences", "2", "--no-eos", "--max-new-tokens", "5")
        timing = self.check_times(doc, wall)
        self.assertEqual(timing["new_tokens"], 10)  # two sequences of 5
        self.assertEqual(timing["decode_steps"], 4)
        self.assertGreater(timing["prefill_s"], 0)

    def test_no_new_tokens(self):
        doc, wall = self.generate("--prompt", "the cat", "--max-new-tokens", "0")
        timing = self.check_times(doc, wall)
        for key in ("prefill_s", "prefill_cpu_s", "decode_s", "decode_cpu_s", "new_tokens",
                    "decode_steps"):
            self.assertEqual(timing[key], 0, key)
        self.assertEqual(timing["prompt_tokens"], len(doc["results"][0]["prompt_ids"]))


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
