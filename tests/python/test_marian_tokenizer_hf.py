#!/usr/bin/python3
"""Marian's tokenizer files (source.spm / target.spm SentencePiece models + vocab.json) in
`attnkit generate`, against transformers' MarianTokenizer (4.38.2, with sentencepiece 0.2.3; the
held-out peer). The test trains two tiny Unigram SentencePiece models (an English-like source and a
Spanish-like target side), joins their pieces into one vocab.json the way Opus-MT directories do
(</s> 0, <unk> 1, ..., <pad> last), saves MarianTokenizer + a tiny random MarianMTModel, then:
  - `attnkit generate --prompt TEXT --json`: prompt_ids equal MarianTokenizer(TEXT).input_ids
    (a language code >>es<<, words the vocabulary lacks, punctuation, accents, several spaces);
  - the translation: ids equal transformers' generate, and the text equals
    MarianTokenizer.decode(..., skip_special_tokens=True), in --json and streamed to stdout.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import runner

runner.run_in_peer_venv("transformers")

import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

BUILD_DIR = "build"

SOURCE_TEXT = [
    "the cat sat on the mat", "a dog runs in the park", "the old man reads a book",
    "she writes letters to her friend", "we eat bread and cheese at noon",
    "the children play in the garden", "rain falls on the roof at night",
    "my brother lives near the river", "the teacher speaks to the students",
    "birds sing in the early morning", "the train leaves the station", "they open the window",
]
TARGET_TEXT = [
    "el gato se sentó en la alfombra", "un perro corre en el parque", "el anciano lee un libro",
    "ella escribe cartas a su amiga", "comemos pan y queso al mediodía",
    "los niños juegan en el jardín", "la lluvia cae sobre el techo de noche",
    "mi hermano vive cerca del río", "el maestro habla a los estudiantes",
    "los pájaros cantan temprano", "el tren sale de la estación", "ellos abren la ventana",
]
PROMPTS = ["the cat sat on the mat", ">>es<< the old man reads a book",
           "Zebras, quickly!  the  dog runs…", "mañana el niño"]


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", *argv],
                       capture_output=True, timeout=300)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def train_spm(directory, name, lines, size):
    corpus = os.path.join(directory, name + ".txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines * 3) + "\n")
    prefix = os.path.join(directory, name)
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=size,
                                   model_type="unigram", hard_vocab_limit=False,
                                   character_coverage=1.0, minloglevel=2)
    return prefix + ".model"


def make_marian_dir(directory):
    work = os.path.join(directory, "spm")
    os.makedirs(work)
    source = train_spm(work, "source", SOURCE_TEXT, 60)
    target = train_spm(work, "target", TARGET_TEXT, 60)
    vocab = {"</s>": 0, "<unk>": 1, ">>es<<": 2}
    for model in (source, target):
        sp = spm.SentencePieceProcessor(model_file=model)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece not in vocab and piece not in ("<s>", "<unk>", "</s>"):
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    os.makedirs(directory, exist_ok=True)
    vocab_path = os.path.join(work, "vocab.json")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    tokenizer = MarianTokenizer(source, target, vocab_path)
    tokenizer.save_pretrained(directory)
    config = MarianConfig(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                          decoder_ffn_dim=64, max_position_embeddings=256, pad_token_id=vocab["<pad>"],
                          decoder_start_token_id=vocab["<pad>"], eos_token_id=0, forced_eos_token_id=0,
                          bad_words_ids=[[vocab["<pad>"]]], scale_embedding=True,
                          activation_function="swish", init_std=0.2)
    torch.manual_seed(5)
    model = MarianMTModel(config).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return model, MarianTokenizer.from_pretrained(directory)


class MarianTokenizerHf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "opus-mt-tiny")
        cls.model, cls.tokenizer = make_marian_dir(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_files_are_marians(self):
        for name in ("source.spm", "target.spm", "vocab.json", "config.json", "model.safetensors"):
            self.assertTrue(os.path.isfile(os.path.join(self.dir, name)), name)

    def test_ids_and_translation_text(self):
        argv = ["generate", "--model", self.dir, "--json", "--max-new-tokens", "12"]
        for p in PROMPTS:
            argv += ["--prompt", p]
        code, out, err = attnkit(*argv)
        self.assertEqual(code, 0, err)
        results = json.loads(out)["results"]
        unk = self.tokenizer.unk_token_id
        self.assertTrue(any(unk in self.tokenizer(p).input_ids for p in PROMPTS), "no unknown piece")
        for prompt, result in zip(PROMPTS, results):
            with self.subTest(prompt=prompt):
                batch = self.tokenizer([prompt], return_tensors="pt")
                self.assertEqual(result["prompt_ids"], batch.input_ids[0].tolist())
                with torch.no_grad():
                    generated = self.model.generate(**batch, max_new_tokens=12, num_beams=1,
                                                    do_sample=False)[0]
                ids = generated[1:].tolist()
                while ids and ids[-1] == self.model.config.pad_token_id:
                    ids.pop()
                self.assertEqual(result["sequences"][0]["ids"], ids)
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
                self.assertEqual(result["sequences"][0]["text"], text)
                # Streamed, the same text.
                code, streamed, err = attnkit("--quiet", "generate", "--model", self.dir, "--prompt",
                                              prompt, "--max-new-tokens", "12")
                self.assertEqual(code, 0, err)
                self.assertEqual(streamed, text + "\n")

    def test_decode_of_every_piece(self):
        # Every vocabulary id decoded alone and all together, with and without special tokens.
        code, out, err = attnkit("generate", "--model", self.dir, "--json", "--max-new-tokens", "1",
                                 "--prompt-ids", " ".join(str(i) for i in range(len(self.tokenizer))))
        self.assertEqual(code, 0, err)
        ids = list(range(len(self.tokenizer)))
        self.assertEqual(json.loads(out)["results"][0]["prompt"],
                         self.tokenizer.decode(ids, skip_special_tokens=False))

    def variant(self, name, vocab_text):
        """A copy of the model directory whose vocab.json is `vocab_text`."""
        directory = os.path.join(self.tmp.name, name)
        shutil.copytree(self.dir, directory)
        with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
            f.write(vocab_text)
        return directory

    def test_vocabulary_read_as_transformers_reads_it(self):
        # json.load's dict: a token repeated in the file keeps its first place and its last id, and
        # an id given to several tokens decodes as the last of them in file order (not in sorted
        # order: "!repeat" sorts before the token whose id it repeats, but comes after it).
        vocab = dict(self.tokenizer.encoder)
        shared = next(t for t, i in vocab.items() if i > 3 and t > "!repeat")
        items = [f"{json.dumps(t, ensure_ascii=False)}: {i}" for t, i in vocab.items()]
        items.insert(3, f"{json.dumps(shared, ensure_ascii=False)}: 0")  # repeated below: that id wins
        items.append(f'"!repeat": {vocab[shared]}')
        directory = self.variant("repeated", "{" + ", ".join(items) + "}")
        theirs = MarianTokenizer.from_pretrained(directory)
        self.assertEqual(theirs.decoder[vocab[shared]], "!repeat")
        ids = list(range(len(vocab)))
        code, out, err = attnkit("generate", "--model", directory, "--json", "--max-new-tokens", "1",
                                 "--prompt-ids", " ".join(str(i) for i in ids))
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["results"][0]["prompt"],
                         theirs.decode(ids, skip_special_tokens=False))
        code, out, err = attnkit("generate", "--model", directory, "--json", "--max-new-tokens", "1",
                                 "--prompt", PROMPTS[0])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["results"][0]["prompt_ids"], theirs(PROMPTS[0]).input_ids)

    def test_bad_vocabulary_is_a_one_line_error(self):
        for name, text, expected in [
                ("negative", '{"</s>": 0, "<unk>": -1}', "token '<unk>' has no non-negative integer id (it has -1)"),
                ("fraction", '{"</s>": 0.5}', "token '</s>' has no non-negative integer id (it has 0.5)"),
                ("string", '{"</s>": "0"}', "token '</s>' has no non-negative integer id (it has a string)"),
                ("nested", '{"</s>": [0]}', "token '</s>' has no non-negative integer id (it has an array)"),
                ("array", '[["</s>", 0]]', "expected an object of token -> id"),
                ("broken", '{"</s>": 0,', "not valid JSON"),
                ("missing", '{"</s>": 0}', "the special token '<unk>' is not in the vocabulary")]:
            with self.subTest(name):
                directory = self.variant("bad-" + name, text)
                code, out, err = attnkit("generate", "--model", directory, "--prompt", "x")
                self.assertNotEqual(code, 0)
                self.assertEqual(out, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(os.path.join(directory, "vocab.json"), err)
                self.assertIn(expected, err)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
