#!/usr/bin/python3
"""attnkit tokenize on SentencePiece Unigram directories against Hugging Face tokenizers (the
official Python binding, run in the test venv): tests/text/hf_unigram_reference.py trains a Unigram
tokenizer on the varied corpus and writes variants (ALBERT-like: Replace, NFKD, StripAccents,
Lowercase, Precompiled charsmap, Metaspace, [CLS] $A [SEP]; Nmt/NFKC/Strip; byte fallback) with
HF's ids and offsets; `echo TEXT | attnkit tokenize --tokenizer DIR --offsets` must print the same."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
import tokenizer_peer  # noqa: E402

BUILD_DIR = "build"
peer_python = tokenizer_peer.peer_python


class UnigramCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.reference = tokenizer_peer.reference_configs("hf_unigram_reference.py", cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def tokenize(self, directory, text, *extra):
        p = tokenizer_peer.tokenize(BUILD_DIR, directory, text, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_hello_world_albert_style(self):
        config = self.reference["albert"]
        case = next(c for c in config["cases"] if c["text"] == "Hello world")
        out = self.tokenize(config["dir"], "Hello world\n")
        self.assertEqual(out.split(), [str(i) for i in case["ids"]])

    def test_every_line_every_config(self):
        for name, config in self.reference.items():
            cases = [c for c in config["cases"] if c["text"] and not any(ch in c["text"] for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")]
            stdin = "".join(c["text"] + "\n" for c in cases)
            lines = self.tokenize(config["dir"], stdin, "--offsets").split("\n")
            for case, line in zip(cases, lines):
                ids, offsets = line.split("\t")
                self.assertEqual(ids.split(), [str(i) for i in case["ids"]], f"{name}: {case['text']!r}")
                self.assertEqual(offsets.split(), [f"{a}:{b}" for a, b in case["offsets"]], f"{name}: {case['text']!r}")

    def test_trained_unigram_loads_in_hf(self):
        """attnkit tokenizer train --kind unigram: HF loads the tokenizer.json and encodes the same."""
        out = os.path.join(self.tmp.name, "trained_by_attnkit")
        p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "tokenizer", "train", "--kind", "unigram", "--vocab-size", "700",
                            "--out", out, "/usr/share/games/fortunes/computers"], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        cases = [c["text"] for c in self.reference["trained"]["cases"] if c["text"] and "\n" not in c["text"] and "\r" not in c["text"]]
        ours = self.tokenize(out, "".join(t + "\n" for t in cases), "--offsets").split("\n")
        script = ("import json,sys\nfrom tokenizers import Tokenizer\nt=Tokenizer.from_file(sys.argv[1])\n"
                  "print(json.dumps([[e.ids,e.offsets] for e in (t.encode(x) for x in json.load(open(sys.argv[2])))]))")
        texts = os.path.join(self.tmp.name, "texts.json")
        with open(texts, "w") as f:
            json.dump(cases, f)
        p = subprocess.run([peer_python(), "-c", script, os.path.join(out, "tokenizer.json"), texts], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        for text, line, (ids, offsets) in zip(cases, ours, json.loads(p.stdout)):
            got_ids, got_offsets = line.split("\t")
            self.assertEqual(got_ids.split(), [str(i) for i in ids], repr(text))
            self.assertEqual(got_offsets.split(), [f"{a}:{b}" for a, b in offsets], repr(text))

    def test_bad_file_one_line(self):
        d = os.path.join(self.tmp.name, "bad")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"},
                       "pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}}, f)
        p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "tokenize", "--tokenizer", d], input="x\n",
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("truncated", p.stderr)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
