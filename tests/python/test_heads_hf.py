#!/usr/bin/python3
"""Head masking and pruning against Hugging Face transformers (4.38.2, the test venv of
scripts/setup.sh, which still has head_mask and prune_heads): tiny random BertModel /
BertForSequenceClassification and GPT2Model / GPT2LMHeadModel built and saved by transformers
(save_pretrained, safetensors). attnkit's outputs must equal HF's:
  - `attnkit encode --head-mask` against HF's forward(head_mask=...);
  - `attnkit prune --heads` of the unpruned directory against HF's prune_heads;
  - HF's own pruned save_pretrained directory (config pruned_heads, smaller tensors) loaded by
    attnkit;
  - attnkit's pruned HF-layout directory loaded by transformers (from_pretrained applies
    pruned_heads) and run there;
  - `attnkit analyze heads` on a GPT2LMHeadModel directory and a text file: its baseline loss
    and next-token accuracy equal HF's loss (labels = input_ids) and argmax accuracy on the same
    windows, its gate gradient E|dL/dxi_h| equals HF's head_mask gradient, and after
    `attnkit prune --heads` its loss equals HF's loss under the same head_mask."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


BUILD_DIR = "build"
TOLERANCE = 1e-4


def attnkit(*argv):
    p = subprocess.run([os.path.join(BUILD_DIR, "attnkit"), "--threads", "1", "--quiet", *argv],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def ids_text(t):
    return " ".join(str(x) for x in t[0].tolist())


def bert(seed, classifier):
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=60, hidden_size=24, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=40,
                                     max_position_embeddings=32, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, num_labels=3)
    cls = transformers.BertForSequenceClassification if classifier else transformers.BertModel
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the 0.02 init: heads clearly differ
            p.normal_(0.0, 0.3)
    return model


def gpt2(seed, lm_head):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=60, n_embd=24, n_layer=3, n_head=4, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cls = transformers.GPT2LMHeadModel if lm_head else transformers.GPT2Model
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def hf_main_output(model, input_ids, head_mask=None):
    with torch.no_grad():
        out = model(input_ids=input_ids, head_mask=head_mask)
    if hasattr(out, "logits"):
        return out.logits
    return out.last_hidden_state


def head_mask_tensor(layers, heads, masked):
    mask = torch.ones(layers, heads)
    for layer, hs in masked.items():
        for h in hs:
            mask[layer, h] = 0.0
    return mask


class HeadsAgainstHuggingFace(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def encode(self, model_dir, input_ids, extra=()):
        out = os.path.join(self.dir, "encoded.safetensors")
        rc, _, err = attnkit("encode", "--model", model_dir, "--ids", ids_text(input_ids),
                             "--output", out, *extra)
        self.assertEqual(rc, 0, err)
        return load_file(out)

    def attnkit_main(self, tensors, model):
        if isinstance(model, transformers.BertForSequenceClassification):
            return tensors["sequence_logits"]
        if isinstance(model, transformers.GPT2LMHeadModel):
            return tensors["logits"]
        return tensors["last_hidden_state"]

    def check_family(self, name, make):
        for with_head in (False, True):
            with self.subTest(model=name, head=with_head):
                model = make(5, with_head)
                full_dir = os.path.join(self.dir, f"{name}-{with_head}-full")
                model.save_pretrained(full_dir, safe_serialization=True)
                torch.manual_seed(1)
                input_ids = torch.randint(0, 60, (1, 9))
                masked = {0: [1], 2: [0, 2, 3]}
                # 1. head_mask
                want = hf_main_output(model, input_ids, head_mask_tensor(3, 4, masked))
                got = self.attnkit_main(self.encode(full_dir, input_ids,
                                                    ["--head-mask", json.dumps(masked)]), model)
                self.assertLess((got - want).abs().max().item(), TOLERANCE)
                # The mask matters (the comparison is not vacuous).
                unmasked = hf_main_output(model, input_ids)
                self.assertGreater((unmasked - want).abs().max().item(), 1e-3)
                # 2. HF prune_heads == attnkit prune --heads
                model.prune_heads(masked)
                want_pruned = hf_main_output(model, input_ids)
                self.assertLess((want_pruned - want).abs().max().item(), TOLERANCE)
                pruned_dir = os.path.join(self.dir, f"{name}-{with_head}-attnkit-pruned")
                rc, _, err = attnkit("prune", "--model", full_dir, "--heads", json.dumps(masked),
                                     "--out", pruned_dir)
                self.assertEqual(rc, 0, err)
                with open(os.path.join(pruned_dir, "config.json")) as f:
                    self.assertEqual(json.load(f)["pruned_heads"], {"0": [1], "2": [0, 2, 3]})
                got = self.attnkit_main(self.encode(pruned_dir, input_ids), model)
                self.assertLess((got - want_pruned).abs().max().item(), TOLERANCE)
                # 3. HF's own pruned save loads in attnkit, pruned.
                hf_pruned_dir = os.path.join(self.dir, f"{name}-{with_head}-hf-pruned")
                model.save_pretrained(hf_pruned_dir, safe_serialization=True)
                got = self.attnkit_main(self.encode(hf_pruned_dir, input_ids), model)
                self.assertLess((got - want_pruned).abs().max().item(), TOLERANCE)
                # 4. attnkit's pruned directory loads in transformers, pruned.
                reloaded = type(model).from_pretrained(pruned_dir).eval()
                self.assertLess((hf_main_output(reloaded, input_ids) - want_pruned).abs().max().item(),
                                TOLERANCE)

    def test_bert(self):
        self.check_family("bert", bert)

    def test_gpt2(self):
        self.check_family("gpt2", gpt2)

    def test_gpt2_language_model_loss_and_gate_gradient(self):
        words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "park"]
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
        model = gpt2(6, True)  # 60 ids; the text uses the first 15
        model_dir = os.path.join(self.dir, "gpt2-lm")
        model.save_pretrained(model_dir, safe_serialization=True)
        with open(os.path.join(model_dir, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
        # The text, and its windows as attnkit cuts them: the words of every line (the WordPiece
        # vocabulary holds each; no special tokens, as train --task.name lm reads text),
        # concatenated, in windows of 16 tokens that share one token.
        torch.manual_seed(2)
        lines = [" ".join(words[i] for i in torch.randint(0, len(words), (7,)).tolist()) for _ in range(30)]
        text = os.path.join(self.dir, "text.txt")
        with open(text, "w") as f:
            f.write("\n".join(lines) + "\n")
        ids = [vocab.index(w) for line in lines for w in line.split()]
        length, batch = 16, 4
        windows = torch.tensor([ids[i:i + length] for i in range(0, len(ids) - length + 1, length - 1)])

        def analyze(directory, out):
            rc, _, err = attnkit("analyze", "heads", "--model", directory, "--tokenizer", model_dir,
                                 "--data", text, "--max-length", str(length), "--batch-size", str(batch),
                                 "--no-ablation", "--fractions", "50", "--out", out)
            self.assertEqual(rc, 0, err)
            with open(os.path.join(out, "heads.json")) as f:
                return json.load(f)

        def hf_loss(head_mask):
            with torch.no_grad():
                logits = model(input_ids=windows, head_mask=head_mask).logits[:, :-1]
            targets = windows[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
            return loss.item(), (logits.argmax(-1) == targets).double().mean().item()

        j = analyze(model_dir, os.path.join(self.dir, "lm-heads"))
        self.assertEqual(j["metric"], "next_token_accuracy")
        loss, accuracy = hf_loss(None)
        self.assertLess(abs(j["baseline_loss"] - loss), TOLERANCE * max(1.0, loss))
        self.assertAlmostEqual(j["baseline_perplexity"], math.exp(j["baseline_loss"]), places=6)
        # Argmax ties aside (none expected), the same predictions.
        self.assertLessEqual(abs(j["ablation"]["baseline"] - accuracy), 1.0 / windows[:, 1:].numel() + 1e-12)
        self.assertEqual(j["profiles"][0]["steps"][0]["metric"], j["ablation"]["baseline"])
        # HF's head-importance recipe: |d loss / d head_mask| per batch, averaged over batches.
        gate = torch.zeros(3, 4)
        for start in range(0, windows.size(0), batch):
            head_mask = torch.ones(3, 4, requires_grad=True)
            x = windows[start:start + batch]
            model(input_ids=x, labels=x, head_mask=head_mask).loss.backward()
            gate += head_mask.grad.abs()
        gate /= (windows.size(0) + batch - 1) // batch
        got = torch.tensor(j["importance"]["gate_gradient"], dtype=torch.float32)
        self.assertGreater(gate.abs().max().item(), 1e-3)
        self.assertLess((got - gate).abs().max().item(), TOLERANCE * gate.abs().max().item())
        # Pruned by attnkit = masked by HF, for the language-model loss.
        masked = {0: [1], 2: [0, 2, 3]}
        pruned_dir = os.path.join(self.dir, "gpt2-lm-pruned")
        rc, _, err = attnkit("prune", "--model", model_dir, "--heads", json.dumps(masked), "--out", pruned_dir)
        self.assertEqual(rc, 0, err)
        j = analyze(pruned_dir, os.path.join(self.dir, "lm-heads-pruned"))
        masked_loss, _ = hf_loss(head_mask_tensor(3, 4, masked))
        self.assertLess(abs(j["baseline_loss"] - masked_loss), TOLERANCE * max(1.0, masked_loss))
        self.assertGreater(abs(masked_loss - loss), 1e-3)

    def test_bad_head_mask_is_one_line(self):
        model = bert(2, False)
        d = os.path.join(self.dir, "bert")
        model.save_pretrained(d, safe_serialization=True)
        rc, out, err = attnkit("encode", "--model", d, "--ids", "1 2 3", "--head-mask", '{"0": [9]}')
        self.assertNotEqual(rc, 0)
        self.assertIn("--head-mask", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        rc, out, err = attnkit("prune", "--model", d, "--out", os.path.join(self.dir, "p"),
                               "--heads", '{"7": [0]}')
        self.assertNotEqual(rc, 0)
        self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
