#!/usr/bin/python3
"""A GGUF file's tokenizer (formats/gguf_tokenizer.h) against transformers 5.x reading the same file.

Run: python3 tests/python/test_gguf_tokenizer_hf.py [--build-dir BUILD]

Needs the Python package's venv (~/.cache/attnkit/venv-py: transformers 5.x and the gguf package);
ctest starts this file with /usr/bin/python3 and it runs itself again with that venv's Python.
Without the venv it exits 77, which ctest reports as skipped, with one line saying why.

The peer is AutoTokenizer.from_pretrained(DIR, gguf_file=NAME). For each file the test compares
  - the tokenizer.json attnkit builds (BUILD/attnkit_gguf_probe FILE --tokenizer) with the one
    transformers builds (backend_tokenizer.to_str()): model (vocabulary, merges, flags),
    normalizer, pre-tokenizer, post-processor, decoder, added tokens; and tokenizer_config's
    special tokens, add_bos/add_eos and chat template with the tokenizer's attributes;
  - the ids of held-out text (English and Spanish Bible verses from the SWORD modules that
    scripts/setup.sh installs, and hard cases: digits, contractions, emoji, CJK, runs of white
    space and newlines, special tokens written in the text), with and without special tokens,
    and the decoded text (special tokens skipped and kept), through the library (the probe's
    --encode) and, for the verses, through `attnkit tokenize --tokenizer FILE.gguf` [--decode].
Files: small ones written here with the gguf package's GGUFWriter, from vocabularies trained here
with the tokenizers library (byte-level BPE under each tokenizer.ggml.pre kind attnkit knows;
SentencePiece-style BPE with merges derived from scores or given, with the Gemma, Gemma 4 and
Phi-3 variants), and the real SmolLM2-135M and Gemma 3 270M files in ~/.cache/attnkit/weights when
they are there (that part is skipped with one line otherwise).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import runner  # noqa: E402

runner.run_in_venv_py(["gguf"])

import unittest  # noqa: E402

import gguf  # noqa: E402
import numpy as np  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
BUILD = runner.build_dir()
PROBE = os.path.join(BUILD, "attnkit_gguf_probe")
CLI = os.path.join(BUILD, "attnkit")
WEIGHTS = os.path.join(runner.cache_dir(), "weights")
REAL_FILES = ["smollm2-135m-instruct.gguf", "gemma-3-270m-q4_k_m.gguf"]

HARD_CASES = [
    "", " ", "Hello world", " Hello  world ", "   leading and trailing   ", "a\tb\t\tc", "tabs\t \t and  spaces",
    "line one\nline two\n\nline four\n", "\r\nwindows\r\n", "\n\n\n", "   \n  \n",
    "1234567890 3.14159 1,000,000 2024-11-27 0x1F 007", "Numbers: 12 123 1234 12345 123456",
    "It's, I'm, we'll, they'd, you've, she's, DON'T, I'M, Y'ALL'D", "o'clock rock'n'roll '90s",
    "emoji 🙂👍🏽 👨‍👩‍👧 ❤️ 🇪🇸 🤖!", "你好，世界。日本語のテキストです。한국어 텍스트", "中文 mixed with English 和数字123",
    "café naïve Ünïcödé résumé señor niño ¿Qué? ¡Sí!", "Ελληνικά Русский язык العربية עברית हिन्दी",
    "zero\u200bwidth\u200djoiner e\u0301 A\u030a", "$%&*()[]{}<>/\\|~`^_-+=;:,.?!@#", "....!!!???---___",
    "def f(x):\n    return x ** 2  # comment\n", "<html><body class=\"x\">Hi</body></html>",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>text<|endoftext|>",
    "<s> hello </s>", "<bos>Hola<eos>", "<think>reason</think> answer", "<unk> <pad> <mask>",
    "x<|im_end|>y <|im_start|> z", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "[multimodal] <unused0> <start_of_image>", "▁already▁spaced", "  ▁ ▁▁ ", "\u3000ideographic\u3000space",
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "controls \x04\x06 \x13x\x1d\x7f and planes \U00050000 \U000E0041\U000E007F",
]


def strip_osis(text):
    text = re.sub(r"<note\b.*?</note>", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def bible_verses(module):
    """(key, text) of every verse of a SWORD module, markup and notes removed."""
    if shutil.which("mod2imp") is None:
        return []
    p = subprocess.run(["mod2imp", module], capture_output=True, text=True, errors="replace")
    verses = []
    for record in p.stdout.split("$$$")[1:]:
        key, _, body = record.partition("\n")
        if re.search(r" [1-9]\d*:[1-9]\d*$", key):
            text = strip_osis(body)
            if text:
                verses.append((key, text))
    return verses


VERSES = {"en": bible_verses("engWEB2015eb"), "es": bible_verses("spaRV1909eb")}


def held_out(language, every=97, offset=0):
    return [text for i, (_, text) in enumerate(VERSES[language]) if i % every == offset]


def training_text():
    """What the small vocabularies are trained on: verses the held-out sets do not use, and
    a few lines of other scripts, digits and code."""
    lines = []
    for language in ("en", "es"):
        lines += [text for i, (_, text) in enumerate(VERSES[language]) if i % 97 not in (0, 1) and i % 5 == 0]
    lines += ["你好世界，这是一个测试。日本語のテキスト。한국어", "Numbers 0123456789 and 3.14 or 1,000",
              "def f(x):\n    return x  # code", "emoji 🙂👍 ❤️", "It's we'll they'd I'm you've"] * 20
    return lines


def probe(path, mode, stdin=None):
    p = subprocess.run([PROBE, path, mode], input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"attnkit_gguf_probe {path} {mode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def write_gguf(path, architecture, tokenizer_keys, vocab_size):
    """A GGUF file with a one-layer model's hyper-parameters (transformers reads the config too),
    the tokenizer metadata given as (method name, value) pairs of GGUFWriter, and one tensor."""
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-6)
    for method, value in tokenizer_keys:
        getattr(writer, method)(value)
    writer.add_tensor("token_embd.weight", np.zeros((vocab_size, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def train_byte_level(lines):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    return json.loads(tokenizer.to_str())["model"]


def train_sentencepiece(lines):
    tokenizer = Tokenizer(models.BPE(byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False, limit_alphabet=150)
    tokenizer.train_from_iterator(lines, trainer)
    return json.loads(tokenizer.to_str())["model"]


def sentencepiece_vocabulary(model, gemma=False):
    """tokens, scores, types of a llama.cpp-style SentencePiece vocabulary: the special tokens, the
    256 byte tokens, then the pieces in training order (score -index, so merges follow it)."""
    if gemma:
        specials = [("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2), ("<mask>", 3), ("[multimodal]", 4)]
    else:
        specials = [("<unk>", 2), ("<s>", 3), ("</s>", 3)]
    tokens = [t for t, _ in specials] + [f"<0x{b:02X}>" for b in range(256)]
    types = [k for _, k in specials] + [6] * 256
    pieces = sorted(model["vocab"].items(), key=lambda item: item[1])
    for piece, _ in pieces:
        tokens.append(piece)
        types.append(1)
    if gemma:  # Gemma writes its space tokens with spaces; one user-defined token
        tokens += ["  ", "   ", "<start_of_turn>"]
        types += [1, 1, 4]
    scores = [0.0] * (len(specials) + 256) + [-float(i) for i in range(len(tokens) - len(specials) - 256)]
    return tokens, scores, types


class GgufTokenizerTest(unittest.TestCase):
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnkit-gguf-tok-")
        lines = training_text()
        cls.byte_level = train_byte_level(lines)
        cls.sentencepiece = train_sentencepiece(lines)
        cls.texts = HARD_CASES + held_out("en") + held_out("es")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- comparison ------------------------------------------------------------------------

    def compare_json(self, path, hf):
        ours = probe(path, "--tokenizer")
        theirs = json.loads(hf.backend_tokenizer.to_str())
        mine = ours["tokenizer"]
        for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            self.assertEqual(mine[part], theirs[part], f"{path}: {part}")
        model, their_model = mine["model"], theirs["model"]
        for key in their_model:
            if key not in ("vocab", "merges"):
                self.assertEqual(model[key], their_model[key], f"{path}: model.{key}")
        self.assertEqual(model["vocab"], their_model["vocab"], f"{path}: model.vocab")
        self.assertEqual(len(model["merges"]), len(their_model["merges"]), f"{path}: number of merges")
        self.assertEqual(model["merges"], their_model["merges"], f"{path}: model.merges")
        self.assertEqual(mine["added_tokens"], theirs["added_tokens"], f"{path}: added_tokens")
        config = ours["config"]
        for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
            self.assertEqual(config[name], getattr(hf, name), f"{path}: {name}")
        self.assertEqual(config["add_bos_token"], hf.add_bos_token, f"{path}: add_bos_token")
        self.assertEqual(config["add_eos_token"], hf.add_eos_token, f"{path}: add_eos_token")
        self.assertEqual(config.get("chat_template"), hf.chat_template, f"{path}: chat_template")
        return mine

    def compare_encodings(self, path, hf, texts):
        ours = probe(path, "--encode", json.dumps(texts))
        mismatches = []
        for text, result in zip(texts, ours):
            ids = hf(text)["input_ids"]
            checks = [("ids", result["ids"], ids),
                      ("plain_ids", result["plain_ids"], hf(text, add_special_tokens=False)["input_ids"]),
                      ("text", result["text"], hf.decode(ids, skip_special_tokens=True)),
                      ("all_text", result["all_text"], hf.decode(ids, skip_special_tokens=False))]
            for what, mine, theirs in checks:
                if mine != theirs:
                    mismatches.append(f"{what} of {text!r}: attnkit {mine!r}, transformers {theirs!r}")
        self.assertEqual(mismatches[:5], [], f"{path}: {len(mismatches)} of {4 * len(texts)} differ")
        return sum(len(r["ids"]) for r in ours)

    def compare_cli(self, path, hf, texts):
        """`attnkit tokenize --tokenizer FILE.gguf` (and --decode) on one-line texts."""
        lines = [t for t in texts if "\n" not in t and "\r" not in t]
        p = subprocess.run([CLI, "tokenize", "--tokenizer", path], input="\n".join(lines) + "\n",
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = [[int(x) for x in line.split()] for line in p.stdout.split("\n")[:-1]]
        expected = [hf(t)["input_ids"] for t in lines]
        self.assertEqual(len(got), len(expected))
        self.assertEqual([i for i in range(len(lines)) if got[i] != expected[i]], [], path)
        # Decoded text is printed as bytes (a token may hold part of a character); transformers
        # replaces what is not UTF-8.
        p = subprocess.run([CLI, "tokenize", "--tokenizer", path, "--decode"],
                           input=("\n".join(" ".join(map(str, ids)) for ids in expected) + "\n").encode(),
                           capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        decoded = p.stdout.decode("utf-8", "replace").split("\n")[:-1]
        self.assertEqual(decoded, [hf.decode(ids, skip_special_tokens=True) for ids in expected], path)

    def check_file(self, path, texts=None):
        directory, name = os.path.split(path)
        hf = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        mine = self.compare_json(path, hf)
        self.compare_encodings(path, hf, texts if texts is not None else self.texts)
        return hf, mine

    # ---- small files -----------------------------------------------------------------------

    def byte_level_file(self, name, pre, add_bos=None, add_eos=None, extra=()):
        model = self.byte_level
        tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
        tokens += ["<think>", "</think>", "<｜bos｜>", "€", "naïve"]
        types = [3 if t.startswith("<|") else 1 for t in tokens]
        types[-5:] = [4, 4, 3, 1, 1]
        merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
        keys = [("add_tokenizer_model", "gpt2"), ("add_token_list", tokens), ("add_token_types", types),
                ("add_token_merges", merges), ("add_bos_token_id", 1), ("add_eos_token_id", 2),
                ("add_unk_token_id", 0), ("add_pad_token_id", 2), ("add_chat_template", "{{ messages }}")]
        if pre is not None:
            keys.append(("add_tokenizer_pre", pre))
        if add_bos is not None:
            keys.append(("add_add_bos_token", add_bos))
        if add_eos is not None:
            keys.append(("add_add_eos_token", add_eos))
        path = os.path.join(self.tmp, name)
        write_gguf(path, "llama", keys + list(extra), len(tokens))
        return path

    def test_byte_level_pre_tokenizer_kinds(self):
        kinds = [None, "default", "gpt2", "smollm", "llama-bpe", "llama3", "qwen2", "qwen35", "tekken", "gpt-4o",
                 "dbrx", "deepseek-r1-qwen"]
        for i, pre in enumerate(kinds):
            with self.subTest(pre=pre):
                path = self.byte_level_file(f"gpt2-{i}.gguf", pre, add_bos=i % 2 == 0)
                mine = self.check_file(path)[1]
                step = mine["pre_tokenizer"]
                self.assertEqual(step["type"], "ByteLevel" if pre in (None, "default", "gpt2", "smollm") else "Sequence")

    def test_byte_level_bos_and_eos(self):
        path = self.byte_level_file("gpt2-eos.gguf", "llama-bpe", add_bos=True, add_eos=True)
        hf, mine = self.check_file(path)
        self.assertEqual(hf("hi")["input_ids"][0], 1)
        self.assertEqual(hf("hi")["input_ids"][-1], 2)
        self.compare_cli(path, hf, self.texts)

    def sentencepiece_file(self, name, architecture, with_merges=False, model="llama", extra=()):
        gemma = architecture.startswith("gemma")
        tokens, scores, types = sentencepiece_vocabulary(self.sentencepiece, gemma)
        keys = [("add_tokenizer_model", model), ("add_tokenizer_pre", "default"), ("add_token_list", tokens),
                ("add_token_scores", scores), ("add_token_types", types)]
        if gemma:
            keys += [("add_bos_token_id", 2), ("add_eos_token_id", 1), ("add_unk_token_id", 3), ("add_pad_token_id", 0)]
        else:
            keys += [("add_bos_token_id", 1), ("add_eos_token_id", 2), ("add_unk_token_id", 0)]
        if with_merges:
            merges = [" ".join(m) if isinstance(m, list) else m for m in self.sentencepiece["merges"]]
            keys.append(("add_token_merges", merges))
        path = os.path.join(self.tmp, name)
        write_gguf(path, architecture, keys + list(extra), len(tokens))
        return path

    def test_sentencepiece_merges_from_scores(self):
        path = self.sentencepiece_file("spm-scores.gguf", "llama")
        hf, mine = self.check_file(path)
        self.assertEqual(mine["pre_tokenizer"]["type"], "Metaspace")
        self.assertTrue(hf.add_bos_token)  # no add_bos_token key: SentencePiece adds BOS
        self.compare_cli(path, hf, self.texts)

    def test_sentencepiece_merges_in_file_and_eos(self):
        path = self.sentencepiece_file("spm-merges.gguf", "llama", with_merges=True,
                                       extra=[("add_add_bos_token", False), ("add_add_eos_token", True)])
        hf, _ = self.check_file(path)
        self.assertEqual(hf("a")["input_ids"][-1], 2)

    def test_gemma_variant(self):
        path = self.sentencepiece_file("gemma.gguf", "gemma3", extra=[("add_add_bos_token", True)])
        _, mine = self.check_file(path)
        self.assertIn("▁▁▁", mine["model"]["vocab"])  # the file's "   "
        self.assertEqual(mine["normalizer"]["type"], "Replace")

    def test_gemma4_model(self):
        path = self.sentencepiece_file("gemma4.gguf", "gemma4", model="gemma4", extra=[("add_add_bos_token", True)])
        hf, mine = self.check_file(path)
        self.assertIn("   ", mine["model"]["vocab"])  # not respelled
        self.assertFalse(hf.add_bos_token)  # the chat template writes <bos>

    def test_phi3_variant(self):
        path = self.sentencepiece_file("phi3.gguf", "phi3")
        _, mine = self.check_file(path)
        self.assertIsNone(mine["pre_tokenizer"])
        self.assertEqual(mine["normalizer"]["type"], "Sequence")

    # ---- real files ------------------------------------------------------------------------

    def test_real_files(self):
        missing = [name for name in REAL_FILES if not os.path.exists(os.path.join(WEIGHTS, name))]
        if missing:
            self.skipTest(f"no {', '.join(missing)} in {WEIGHTS} (scripts/setup.sh downloads them)")
        texts = HARD_CASES + held_out("en", 31) + held_out("es", 31)
        for name in REAL_FILES:
            with self.subTest(file=name):
                path = os.path.join(WEIGHTS, name)
                hf, _ = self.check_file(path, texts)
                self.compare_cli(path, hf, texts)


if __name__ == "__main__":
    if not VERSES["en"] or not VERSES["es"]:
        print("test_gguf_tokenizer_hf.py: note: no SWORD Bible modules (scripts/setup.sh installs them); "
              "comparing on the hard cases only", flush=True)
    runner.run()
