#!/usr/bin/python3
"""RoBERTa against transformers: a tiny random RobertaForMaskedLM saved with save_pretrained runs
in `attnkit encode` with hidden states and masked-LM logits equal within 1e-4 (one row, a padded
row of a batch -- RoBERTa's positions skip the padding --, a pair <s> A </s></s> B </s>); a
RobertaForSequenceClassification gives the same logits and converts back to the same tensors;
attnkit reads the RoBERTa byte-BPE tokenizer (vocab.json + merges.txt, and tokenizer.json) to
the ids transformers gives; and `attnkit train --task.name mlm --model.family roberta` trains a
model that converts to a RobertaForMaskedLM with logits equal to `attnkit encode`'s.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh), which has transformers."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (RobertaConfig, RobertaForMaskedLM,  # noqa: E402
                          RobertaForSequenceClassification, RobertaTokenizer, RobertaTokenizerFast)
from transformers.models.roberta.tokenization_roberta import bytes_to_unicode  # noqa: E402

BUILD_DIR = "build"
TOLERANCE = 1e-4
WORDS = ["alpha", "beta", "gamma", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]
PAD = 1


def attnkit(*argv, stdin=None):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "--quiet", *argv],
                       capture_output=True, text=True, timeout=300, input=stdin)
    return p.returncode, p.stdout, p.stderr


def write_tokenizer(directory):
    """A RoBERTa byte-level BPE vocabulary: the five specials, the 256 byte characters and merges
    that spell WORDS with and without their leading space."""
    vocab = {token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    for ch in sorted(set(bytes_to_unicode().values())):
        vocab[ch] = len(vocab)
    merges = []
    for word in WORDS:
        for spelled in (word, "\u0120" + word):
            current = spelled[0]
            for ch in spelled[1:]:
                if current + ch not in vocab:
                    merges.append((current, ch))
                    vocab[current + ch] = len(vocab)
                current += ch
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(directory, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return len(vocab)


def tiny_config(vocab_size, **extra):
    return RobertaConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=34, type_vocab_size=1,
                         layer_norm_eps=1e-5, pad_token_id=PAD, bos_token_id=0, eos_token_id=2, **extra)


def randomize(model):
    """Every parameter random, the padding rows included (transformers zeroes them), so a padding
    position that read the wrong row would show."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


class RobertaPeer(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.vocab_size = write_tokenizer(os.path.join(self.dir, "tok"))

    def tearDown(self):
        self.tmp.cleanup()

    def encode(self, model_dir, ids, mask=None):
        out = os.path.join(self.dir, "encoded.safetensors")
        argv = ["encode", "--model", model_dir, "--ids", " ".join(map(str, ids)), "--output", out]
        if mask is not None:
            argv += ["--attention-mask", " ".join(map(str, mask))]
        rc, _, err = attnkit(*argv)
        self.assertEqual(rc, 0, err)
        return load_file(out)

    def assert_close(self, got, ref, what):
        self.assertEqual(list(got.shape), list(ref.shape), what)
        self.assertLess((got - ref).abs().max().item(), TOLERANCE, what)

    def assert_mlm_matches(self, model_dir, model, rows, masks=None):
        """attnkit encode of each row of the batch `rows` equals transformers' batch output."""
        input_ids = torch.tensor(rows)
        attention_mask = torch.tensor(masks) if masks else torch.ones_like(input_ids)
        with torch.no_grad():
            ref = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        for r, row in enumerate(rows):
            got = self.encode(model_dir, row, masks[r] if masks else None)
            for k, hidden in enumerate(ref.hidden_states):
                self.assert_close(got[f"hidden_states.{k}"][0], hidden[r], f"row {r} hidden_states.{k}")
            self.assert_close(got["last_hidden_state"][0], ref.hidden_states[-1][r], f"row {r} last_hidden_state")
            self.assert_close(got["mlm_logits"][0], ref.logits[r], f"row {r} mlm_logits")

    def tokenizer_ids(self, tokenizer_path, lines, *flags):
        rc, out, err = attnkit("tokenize", "--tokenizer", tokenizer_path, *flags, stdin="".join(l + "\n" for l in lines))
        self.assertEqual(rc, 0, err)
        return [[int(t) for t in line.split("\t")[0].split()] for line in out.splitlines()]

    def test_masked_lm_loads_with_equal_outputs(self):
        model = randomize(RobertaForMaskedLM(tiny_config(self.vocab_size)))
        hf_dir = os.path.join(self.dir, "hf")
        model.save_pretrained(hf_dir, safe_serialization=True)
        tokenizer = RobertaTokenizer(os.path.join(self.dir, "tok", "vocab.json"),
                                     os.path.join(self.dir, "tok", "merges.txt"))
        single = tokenizer("alpha beta <mask> delta")["input_ids"]
        pair = tokenizer("alpha fox", "golf hotel india")["input_ids"]
        self.assertEqual(pair.count(2), 3)  # <s> A </s></s> B </s>
        self.assert_mlm_matches(hf_dir, model, [single])
        self.assert_mlm_matches(hf_dir, model, [pair])
        # A batch of two rows, the shorter right-padded: its padding tokens read position row
        # pad_token_id, its real tokens the rows after it.
        longer = single + [5, 6]
        padded = single + [PAD, PAD]
        mask = [1] * len(single) + [0, 0]
        self.assert_mlm_matches(hf_dir, model, [padded, longer], [mask, [1] * len(longer)])

    def test_sequence_classifier_loads_and_converts_back(self):
        model = randomize(RobertaForSequenceClassification(tiny_config(self.vocab_size, num_labels=3)))
        hf_dir, back = os.path.join(self.dir, "cls"), os.path.join(self.dir, "back")
        model.save_pretrained(hf_dir, safe_serialization=True)
        ids = [0, 20, 30, 40, 2, 2, 50, 2]
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([ids])).logits
        got = self.encode(hf_dir, ids)
        self.assert_close(got["sequence_logits"], ref, "sequence_logits")
        rc, _, err = attnkit("convert", "--from", hf_dir, "--to", back, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        original, saved = load_file(os.path.join(hf_dir, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
        self.assertEqual(sorted(saved), sorted(original))
        for name, value in original.items():
            self.assertTrue(torch.equal(saved[name], value), name)

    def test_masked_lm_fine_tunes_as_a_classifier(self):
        model = randomize(RobertaForMaskedLM(tiny_config(self.vocab_size)))
        hf_dir = os.path.join(self.dir, "hf")
        model.save_pretrained(hf_dir, safe_serialization=True)
        for name in ("vocab.json", "merges.txt"):  # the tokenizer --init finds in the model directory
            shutil.copy(os.path.join(self.dir, "tok", name), hf_dir)
        rng = random.Random(4)
        for split, count in (("train", 24), ("val", 8)):
            with open(os.path.join(self.dir, f"{split}.tsv"), "w") as f:
                for _ in range(count):
                    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
                    f.write(" ".join(words) + "\t" + ("long" if len(words) > 3 else "short") + "\n")
        run = os.path.join(self.dir, "fine")
        rc, _, err = attnkit("train", "--task.name", "classification", "--task.data", os.path.join(self.dir, "train.tsv"),
                             "--init", hf_dir, "--model.pooling", "pooler", "--task.batch_size", "4", "--task.truncate", "16", "--run.steps", "2",
                             "--run.dir", run)
        self.assertEqual(rc, 0, err)
        # The body and embeddings come from the checkpoint; the pooler (RoBERTa's classifier.dense)
        # and the classifier are new.
        self.assertRegex(err, r"new: transformer\.pooler\.weight, transformer\.pooler\.bias, classifier\.weight, "
                              r"classifier\.bias\n")
        back = os.path.join(self.dir, "fine_hf")
        rc, _, err = attnkit("convert", "--from", run, "--to", back, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        classifier = RobertaForSequenceClassification.from_pretrained(back).eval()
        ids = [0, 20, 30, 40, 2]
        with torch.no_grad():
            ref = classifier(input_ids=torch.tensor([ids])).logits
        self.assert_close(self.encode(run, ids)["sequence_logits"], ref, "sequence_logits")

    def test_tokenizer_files_give_the_ids_of_transformers(self):
        tok = os.path.join(self.dir, "tok")
        slow = RobertaTokenizer(os.path.join(tok, "vocab.json"), os.path.join(tok, "merges.txt"))
        fast = RobertaTokenizerFast(os.path.join(tok, "vocab.json"), os.path.join(tok, "merges.txt"))
        fast_dir = os.path.join(self.dir, "fast")
        fast.save_pretrained(fast_dir)  # tokenizer.json with RobertaProcessing
        texts = ["alpha beta gamma", " delta  echo", "fox <mask> golf", "hotel<mask> india", "Juliet, alpha!"]
        pairs = [("alpha beta", "gamma delta"), ("fox", " golf <mask>")]
        for path in (tok, os.path.join(fast_dir, "tokenizer.json")):
            self.assertEqual(self.tokenizer_ids(path, texts), [slow(t)["input_ids"] for t in texts], path)
            self.assertEqual(self.tokenizer_ids(path, [a + "\t" + b for a, b in pairs], "--pair"),
                             [slow(a, b)["input_ids"] for a, b in pairs], path)
            rc, out, err = attnkit("tokenize", "--tokenizer", path, "--pair", "--type-ids", stdin="alpha\tbeta\n")
            self.assertEqual(rc, 0, err)
            self.assertEqual(set(out.strip().split("\t")[1].split()), {"0"}, out)  # RoBERTa: type ids 0

    def test_mlm_training_saves_a_roberta_for_masked_lm(self):
        rng = random.Random(1)
        data = os.path.join(self.dir, "text.txt")
        with open(data, "w") as f:
            for _ in range(200):
                f.write(" ".join(rng.choice(WORDS) for _ in range(8)) + "\n")
        run = os.path.join(self.dir, "run")
        rc, _, err = attnkit("train", "--task.name", "mlm", "--model.family", "roberta", "--task.data", data,
                             "--task.tokenizer", os.path.join(self.dir, "tok"), "--task.truncate", "16",
                             "--task.batch_size", "4", "--model.hidden", "16", "--model.layers", "2",
                             "--model.heads", "2", "--run.steps", "3", "--run.dir", run)
        self.assertEqual(rc, 0, err)
        hf_dir = os.path.join(self.dir, "converted")
        rc, _, err = attnkit("convert", "--from", run, "--to", hf_dir, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(hf_dir, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["model_type"], config["architectures"]), ("roberta", ["RobertaForMaskedLM"]))
        self.assertEqual((config["pad_token_id"], config["type_vocab_size"]), (PAD, 1))
        model = RobertaForMaskedLM.from_pretrained(hf_dir).eval()
        ids = [0, 20, 4, 40, 2]  # <s> .. <mask> .. </s>
        self.assert_mlm_matches(run, model, [ids + [PAD, PAD], ids + [30, 50]], [[1] * 5 + [0, 0], [1] * 7])


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
