#!/usr/bin/python3
"""The Llama families that need transformers 5.x (issue 42; the checks: llama_families.py): llama
with llama3 rope scaling, phi3 (fused q|k|v and gate|up, partial rotary, longrope: a forward of 24
tokens past original_max_position_embeddings 16 uses the long factors), gemma2 (sub-layer
output norms, attention and final logit soft-caps, query_pre_attn_scalar, sliding and full layers
with a window shorter than the prompt) and gemma3_text (q/k norms, a local rotary base on the
sliding layers).

Needs the Python package's venv (transformers 5.x, runner.run_in_venv_py): exits 77
(skipped) without it."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import runner  # noqa: E402

runner.run_in_venv_py()

import unittest  # noqa: E402

import transformers  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from llama_families import FamilyChecks  # noqa: E402

hf_logging.set_verbosity_error()
BUILD_DIR = runner.build_dir()


class LlamaFamiliesHf5(FamilyChecks, unittest.TestCase):
    BUILD_DIR = BUILD_DIR
    NO_EOS = {"eos_token_id": None}
    # transformers' Phi-3 drops its KV cache and recomputes the sequence when generation crosses
    # original_max_position_embeddings (its keys re-rotated with the long factors); attnkit's
    # cache keeps the keys rotated as they were, so generation is compared up to that point
    # (9-token prompts + 7 = 16); the forward check covers the long factors (24 tokens).
    NEW_TOKENS = {"phi3": 7}
    FAMILIES = {
        "llama3": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                   dict(num_key_value_heads=2, rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM,
                 dict(num_key_value_heads=2, partial_rotary_factor=0.5,
                      original_max_position_embeddings=16, rope_theta=10000.0,
                      rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5],
                                    "long_factor": [2.0, 5.0]},
                      pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM,
                   dict(num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
                        sliding_window=6, attn_logit_softcapping=5.0, final_logit_softcapping=3.0)),
        "gemma3": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM,
                   dict(num_hidden_layers=3, num_key_value_heads=1, head_dim=16,
                        query_pre_attn_scalar=16, sliding_window=4,
                        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                        rope_theta=1000000.0, rope_local_base_freq=10000.0)),
    }

    def test_pruned_groups_save_for_transformers(self):
        """Grouped-query pruning: the second key/value group of the llama3 model (query heads 2
        and 3) in both layers leaves 2 query heads and 1 key/value head per layer: saved as a
        Hugging Face directory that transformers loads with attnkit's logits. Uneven groups (one
        head of a group) are refused there and kept in attnkit's format."""
        import json
        import torch
        d, _ = self.models["llama3"]
        out = os.path.join(self.tmp.name, "pruned-hf")
        rc, _, err = self.attnkit("prune", "--model", d, "--out", out, "--heads",
                                  '{"0": [2, 3], "1": [2, 3]}', "--format", "huggingface")
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["num_attention_heads"], config["num_key_value_heads"]), (2, 1))
        again = transformers.LlamaForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
        self.assertEqual(again.model.layers[0].self_attn.k_proj.weight.shape[0], 8)
        ids = torch.tensor([[4, 9, 16, 25, 36, 49, 64, 81]])
        got = self.encode(out, ids[0].tolist())
        with torch.no_grad():
            from llama_families import max_relative, TOLERANCE
            err = max_relative(got["logits"], again(ids).logits)
        self.assertLessEqual(err, TOLERANCE, f"pruned model: logits differ by {err}")
        uneven = os.path.join(self.tmp.name, "pruned-uneven")
        rc, _, err = self.attnkit("prune", "--model", d, "--out", uneven, "--heads", '{"0": [0]}',
                                  "--format", "huggingface")
        self.assertNotEqual(rc, 0)
        self.assertIn("save it in attnkit's format", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        rc, _, err = self.attnkit("prune", "--model", d, "--out", uneven, "--heads", '{"0": [0]}',
                                  "--format", "attnkit")
        self.assertEqual(rc, 0, err)
        self.assertIn("logits", self.encode(uneven, ids[0].tolist()))


if __name__ == "__main__":
    runner.run()
