#!/usr/bin/python3
"""The Llama families (issue 42) against Hugging Face transformers 4.38, the held-out peer (the
checks: llama_families.py): tiny random llama (grouped-query attention, linear rope scaling,
attention biases; and a tied multi-head one), mistral (a sliding window shorter than the prompt),
qwen2 (biases on q/k/v only) and gemma (head_dim != hidden / heads, 1 + w RMSNorm, embeddings x
sqrt(hidden), GELU-tanh gated MLP); one-line errors for bad configs; and `train --init` fine-tuning
the grouped-query llama (its loss falls; the checkpoint saves as a directory transformers loads with
attnkit's logits).

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh), which has transformers 4.38.2."""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import runner  # noqa: E402

runner.run_in_peer_venv("transformers")

import unittest  # noqa: E402

import transformers  # noqa: E402
from llama_families import FamilyChecks  # noqa: E402

BUILD_DIR = runner.build_dir()


class LlamaFamiliesHf(FamilyChecks, unittest.TestCase):
    BUILD_DIR = BUILD_DIR
    FAMILIES = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                  dict(num_key_value_heads=2, attention_bias=True, rope_theta=1000.0,
                       rope_scaling={"type": "linear", "factor": 2.0}, tie_word_embeddings=False)),
        "llama_tied_mha": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                           dict(num_key_value_heads=4, tie_word_embeddings=True)),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                    dict(num_key_value_heads=1, sliding_window=5, rope_theta=10000.0)),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
                  dict(num_key_value_heads=2, rope_theta=100000.0, use_sliding_window=False)),
        "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM,
                  dict(num_key_value_heads=2, head_dim=16, hidden_act="gelu_pytorch_tanh",
                       hidden_activation="gelu_pytorch_tanh")),
    }

    def test_bad_configs_are_one_line_errors(self):
        d, _ = self.models["llama"]
        bad = os.path.join(self.tmp.name, "bad")
        os.makedirs(bad, exist_ok=True)
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        os.link(os.path.join(d, "model.safetensors"), os.path.join(bad, "model.safetensors"))
        for change, pattern in [({"num_key_value_heads": 3}, "num_key_value_heads 3 must divide"),
                                ({"rope_scaling": {"type": "cubic", "factor": 2.0}}, "rope"),
                                ({"hidden_act": "tanhshrink"}, "hidden_act 'tanhshrink' is not supported")]:
            with open(os.path.join(bad, "config.json"), "w") as f:
                json.dump({**config, **change}, f)
            rc, out, err = self.attnkit("encode", "--model", bad, "--ids", "3 4 5")
            self.assertNotEqual(rc, 0)
            self.assertIn(pattern, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_train_init_fine_tunes_and_saves_for_transformers(self):
        d, _ = self.models["llama"]  # grouped-query heads, biases, linear rope scaling
        from safetensors.torch import load_file
        from tokenizers import Tokenizer, models
        from llama_families import VOCAB, max_relative
        start = os.path.join(self.tmp.name, "llama-with-tokenizer")
        shutil.copytree(d, start)
        # A character-level tokenizer inside the model's vocabulary: ids 3.. are the letters.
        letters = "abcdefghijklmnopqrstuvwxyz .,"
        vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: 3 + i for i, c in enumerate(letters)}}
        self.assertLess(len(vocab), VOCAB)
        Tokenizer(models.BPE(vocab=vocab, merges=[])).save(os.path.join(start, "tokenizer.json"))
        data = os.path.join(self.tmp.name, "fine-tune.txt")
        with open(data, "w") as f:
            for i in range(200):
                f.write("the cat sat on the mat, and the dog sat on the log. " * 2 + "\n")
        run = os.path.join(self.tmp.name, "fine-tune-run")
        rc, _, err = self.attnkit("train", "--init", start, "--task.name", "lm", "--task.data", data,
                                  "--task.truncate", "48", "--task.batch_size", "8",
                                  "--run.steps", "40", "--run.log_every", "1", "--optimizer.lr", "3e-3",
                                  "--run.dir", run)
        self.assertEqual(rc, 0, err)
        with open(os.path.join(run, "metrics.jsonl")) as f:
            losses = [json.loads(line)["loss"] for line in f if '"loss"' in line and '"eval"' not in line]
        self.assertGreaterEqual(len(losses), 30)
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        self.assertLess(last, 0.5 * first, f"training loss {first:.3f} -> {last:.3f}")
        checkpoint = os.path.join(run, "checkpoints", "step-00000040")
        hf = os.path.join(self.tmp.name, "fine-tuned-hf")
        rc, _, err = self.attnkit("convert", "--from", checkpoint, "--to", hf, "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(hf, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(d, "config.json")) as f:
            original = json.load(f)
        for key in ("num_key_value_heads", "attention_bias", "rope_scaling", "rope_theta"):
            self.assertEqual(config.get(key), original.get(key), key)
        tuned = transformers.LlamaForCausalLM.from_pretrained(hf, attn_implementation="eager").eval()
        before = load_file(os.path.join(d, "model.safetensors"))
        after = load_file(os.path.join(hf, "model.safetensors"))
        self.assertEqual(before.keys(), after.keys())
        self.assertGreater(max_relative(after["model.layers.0.self_attn.k_proj.weight"],
                                        before["model.layers.0.self_attn.k_proj.weight"]), 1e-3)
        ids = [3 + letters.index(c) for c in "the cat sat on"]
        got = self.encode(checkpoint, ids)
        import torch
        with torch.no_grad():
            ref = tuned(torch.tensor([ids])).logits
        err = max_relative(got["logits"], ref)
        self.assertLessEqual(err, 1e-4, f"fine-tuned logits differ by {err}")


if __name__ == "__main__":
    runner.run()
