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
    pruned_heads) and run there."""
import json
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
