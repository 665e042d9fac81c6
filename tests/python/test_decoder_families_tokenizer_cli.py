#!/usr/bin/python3
"""attnkit tokenize on the tokenizers of today's decoder families against Hugging Face tokenizers
(the official Python binding, run in the test venv): tests/text/hf_decoder_families_reference.py
trains stand-ins in the Llama 3, Qwen2, SmolLM2, Llama 2, Mistral and Gemma tokenizer.json formats
(docs/tokenizers.md, "Decoder families") and gives HF's ids, offsets and decodes on held-out text;
`attnkit tokenize --tokenizer DIR --offsets` must print the same ids and offsets for every line,
and `attnkit tokenize --decode` the same text."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
import tokenizer_peer  # noqa: E402

BUILD_DIR = "build"
FAMILIES = ["llama3", "qwen2", "smollm2", "llama2", "mistral", "gemma"]
# Line breaks of any kind would split a text into several input lines.
BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


class DecoderFamiliesCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.reference = tokenizer_peer.reference_configs("hf_decoder_families_reference.py", cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def attnkit(self, directory, stdin, *extra):
        p = tokenizer_peer.tokenize(BUILD_DIR, directory, stdin, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.split("\n")

    def test_every_line_every_family(self):
        for name in FAMILIES:
            config = self.reference[name]
            cases = [c for c in config["cases"] if c["text"] and not any(ch in c["text"] for ch in BREAKS)]
            self.assertGreater(len(cases), 250, name)
            lines = self.attnkit(config["dir"], "".join(c["text"] + "\n" for c in cases), "--offsets")
            for case, line in zip(cases, lines):
                ids, offsets = line.split("\t")
                self.assertEqual(ids.split(), [str(i) for i in case["ids"]], f"{name}: {case['text']!r}")
                self.assertEqual(offsets.split(), [f"{a}:{b}" for a, b in case["offsets"]], f"{name}: {case['text']!r}")

    def test_decode_every_family(self):
        for name in FAMILIES:
            config = self.reference[name]
            cases = [c for c in config["cases"] if c["ids"] and not any(ch in c["decoded"] for ch in BREAKS)]
            lines = self.attnkit(config["dir"], "".join(" ".join(map(str, c["ids"])) + "\n" for c in cases), "--decode")
            for case, line in zip(cases, lines):
                self.assertEqual(line, case["decoded"], f"{name}: {case['text']!r}")

    def test_bad_split_regex_one_line(self):
        d = os.path.join(self.tmp.name, "bad")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(self.reference["llama3"]["dir"], "tokenizer.json")) as f:
            file = json.load(f)
        file["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "\\s+(?!\\S"}
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(file, f)
        p = tokenizer_peer.tokenize(BUILD_DIR, d, "x\n", timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("Split pre_tokenizer: regex", p.stderr)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
