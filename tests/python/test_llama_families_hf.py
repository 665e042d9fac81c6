#!/usr/bin/python3
"""The Llama families (issue 42) against Hugging Face transformers 4.38, the held-out peer (the
checks: llama_families.py): tiny random llama (grouped-query attention, linear rope scaling,
attention biases; and a tied multi-head one), mistral (a sliding window shorter than the prompt),
qwen2 (biases on q/k/v only) and gemma (head_dim != hidden / heads, 1 + w RMSNorm, embeddings x
sqrt(hidden), GELU-tanh gated MLP); and one-line errors for bad configs.

ctest runs this file with /usr/bin/python3; it re-runs itself with the test venv's python
(scripts/peer_python.sh), which has transformers 4.38.2."""
import json
import os
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


if __name__ == "__main__":
    runner.run()
