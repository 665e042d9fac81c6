#!/usr/bin/python3
"""Rotary positions and RMSNorm (ops/rotary.h, ops/rms_norm.h) against transformers 5.x.

Run: python3 tests/python/test_rotary_hf.py [--build-dir BUILD]

Needs the Python package's venv (~/.cache/attnkit/venv-py: PyTorch 2.x, transformers 5.x; `make
test` starts making it in the background, scripts/python_package_venv.sh makes it); ctest starts
this file with /usr/bin/python3 and it runs itself again with that venv's Python. Without the venv
it exits 77, which ctest reports as skipped, with one line saying why.

attnkit's side comes from the C++ test binary's probe (BUILD/attnkit_ops_tests
--gtest_filter=RotaryHfProbe.*: reads the cases this file writes, writes attnkit's values). For
every scaling kind (default, linear, dynamic, llama3, yarn, longrope; both config styles; partial
and odd partial rotary through Phi-3's classes) the test compares the frequencies the rotary module
holds after each call, attention_scaling, cos and sin (a sequence of calls per case, so the dynamic
and longrope updates are compared too), the initial ROPE_INIT_FUNCTIONS values, and the rotation of
float32 and float64 inputs against apply_rotary_pos_emb; and LlamaRMSNorm / Gemma3RMSNorm in
float32, float64 and bfloat16.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import runner  # noqa: E402

runner.run_in_venv_py()

import unittest  # noqa: E402

import torch  # noqa: E402
from transformers import LlamaConfig, Phi3Config, PhiConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402
from transformers.models.phi import modeling_phi  # noqa: E402
from transformers.models.phi3 import modeling_phi3  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
BUILD = runner.build_dir()
torch.manual_seed(0)


def ramp(first, n):
    return list(range(first, first + n))


# (name, family, config.json, [positions rows per call], heads)
CASES = [
    ("default", "llama", {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64,
                          "rope_theta": 10000.0}, [[ramp(0, 12), ramp(5, 12)]]),
    ("linear legacy type", "llama", {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64,
                                     "rope_theta": 50000.0, "rope_scaling": {"type": "linear", "factor": 2.5}},
     [[ramp(0, 9)], [ramp(100, 9)]]),
    ("dynamic rope_parameters", "llama", {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
                                          "max_position_embeddings": 64,
                                          "rope_parameters": {"rope_type": "dynamic", "factor": 3.0,
                                                              "rope_theta": 10000.0}},
     # init, growth to 100, 80 keeps the grown frequencies, 20 resets, growth to 130
     [[ramp(0, 10)], [ramp(0, 100)], [ramp(0, 80)], [ramp(0, 20)], [ramp(3, 127), ramp(0, 127)]]),
    ("llama3", "llama", {"hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 131072,
                         "rope_theta": 500000.0,
                         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
     [[[0, 1, 2, 3, 5000, 8191, 8192, 131071]]]),
    ("yarn defaults", "llama", {"hidden_size": 128, "num_attention_heads": 2, "max_position_embeddings": 4096,
                                "rope_theta": 10000.0,
                                "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 1024}},
     [[ramp(0, 6) + [1023, 4095]]]),
    ("yarn mscale, no truncation", "llama",
     {"hidden_size": 128, "num_attention_heads": 4, "max_position_embeddings": 2048,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 20000.0, "factor": 16.0, "beta_fast": 16,
                          "beta_slow": 2, "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": False,
                          "original_max_position_embeddings": 128}}, [[ramp(0, 5) + [2047]]]),
    ("yarn attention_factor", "llama",
     {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 256,
      "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "attention_factor": 0.8,
                       "original_max_position_embeddings": 128}}, [[ramp(0, 7)]]),
    ("longrope phi3 partial", "phi3",
     {"hidden_size": 32, "num_attention_heads": 2, "partial_rotary_factor": 0.5, "max_position_embeddings": 64,
      "original_max_position_embeddings": 16, "rope_theta": 10000.0,
      "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.1, 1.5, 2.0],
                       "long_factor": [1.0, 3.0, 9.0, 20.0]}},
     [[ramp(0, 16)], [ramp(0, 40)], [ramp(0, 10)], [ramp(30, 4), ramp(10, 4)]]),
    ("longrope llama factor", "llama",
     {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 512,
      "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 8.0,
                          "attention_factor": 1.3, "original_max_position_embeddings": 64,
                          "short_factor": [1 + 0.1 * i for i in range(8)],
                          "long_factor": [1 + 2.0 * i for i in range(8)]}},
     [[ramp(0, 8)], [ramp(60, 8)]]),
    ("default phi3 partial 0.4", "phi3",
     {"hidden_size": 192, "num_attention_heads": 2, "partial_rotary_factor": 0.4, "max_position_embeddings": 64,
      "rope_theta": 10000.0}, [[ramp(0, 6)]]),
    ("default phi3 odd partial", "phi3",
     {"hidden_size": 20, "num_attention_heads": 2, "partial_rotary_factor": 0.5, "max_position_embeddings": 64,
      "rope_theta": 10000.0}, [[ramp(0, 6)]]),
    ("linear phi partial", "phi",
     {"hidden_size": 64, "num_attention_heads": 2, "partial_rotary_factor": 0.75, "max_position_embeddings": 64,
      "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}}, [[ramp(0, 6)]]),
    ("dynamic phi partial", "phi",
     {"hidden_size": 64, "num_attention_heads": 2, "partial_rotary_factor": 0.75, "max_position_embeddings": 64,
      "rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}},
     [[ramp(0, 6)], [ramp(0, 90)], [ramp(0, 70)], [ramp(0, 5)]]),
]


# family -> (config class, rotary module, apply_rotary_pos_emb). Phi-3's apply_rotary_pos_emb
# rotates the first cos.shape[-1] dims and passes the rest (Phi's attention splits by itself).
FAMILIES = {
    "llama": (LlamaConfig, modeling_llama.LlamaRotaryEmbedding, modeling_llama.apply_rotary_pos_emb),
    "phi3": (Phi3Config, modeling_phi3.Phi3RotaryEmbedding, modeling_phi3.apply_rotary_pos_emb),
    "phi": (PhiConfig, modeling_phi.PhiRotaryEmbedding, modeling_phi3.apply_rotary_pos_emb),
}


def hf_config(family, config):
    return FAMILIES[family][0].from_dict(json.loads(json.dumps(config)))


def head_dim(config):
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def tensor_json(t):
    dtype = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16"}[t.dtype]
    return {"shape": list(t.shape), "dtype": dtype, "data": t.double().flatten().tolist()}


class RotaryAndRmsNormAgainstTransformers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        binary = os.path.join(BUILD, "attnkit_ops_tests")
        if not os.path.exists(binary):
            raise RuntimeError(f"{binary} is missing; build the attnkit_ops_tests target")
        cls.inputs = {"rotary": [], "rms_norm": []}
        for name, family, config, calls in CASES:
            case_calls = []
            for rows in calls:
                n = len(rows[0])
                dtype = torch.float64 if len(case_calls) % 2 else torch.float32
                x = torch.randn(len(rows), 3, n, head_dim(config), dtype=dtype)
                case_calls.append({"positions": rows, "x": tensor_json(x)})
            cls.inputs["rotary"].append({"config": config, "calls": case_calls})
        cls.norm_cases = []
        for kind in ("llama", "gemma"):
            for dtype in (torch.float32, torch.float64, torch.bfloat16):
                x = (torch.randn(2, 5, 48) * 4).to(dtype)
                w = (torch.randn(48) * 0.5).to(dtype)
                eps = 1e-6 if dtype != torch.float64 else 1e-5
                cls.norm_cases.append((kind, dtype, x, w, eps))
                cls.inputs["rms_norm"].append({"kind": kind, "eps": eps, "x": tensor_json(x),
                                               "weight": tensor_json(w)})
        with tempfile.TemporaryDirectory() as tmp:
            path_in, path_out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
            with open(path_in, "w") as f:
                json.dump(cls.inputs, f)
            env = dict(os.environ, ATTNKIT_ROTARY_PROBE_IN=path_in, ATTNKIT_ROTARY_PROBE_OUT=path_out)
            p = subprocess.run([binary, "--gtest_filter=RotaryHfProbe.*"], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"the probe failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
            with open(path_out) as f:
                cls.outputs = json.load(f)
        cls.worst = {}

    @classmethod
    def tearDownClass(cls):
        for key, value in sorted(cls.worst.items()):
            print(f"max |attnkit - transformers| {key}: {value:.3g}")

    def close(self, key, got, want, atol, rtol=0.0):
        got = torch.tensor(got, dtype=torch.float64).reshape(want.shape)
        want = want.double()
        err = (got - want).abs().max().item() if want.numel() else 0.0
        self.worst[key] = max(self.worst.get(key, 0.0), err)
        bound = atol + rtol * want.abs().max().item() if want.numel() else 0
        self.assertLessEqual(err, bound, f"{key}: max abs error {err:.3g} > {bound:.3g}")

    def test_rotary_every_kind(self):
        for (name, family, config, calls), case_in, case_out in zip(
                CASES, self.inputs["rotary"], self.outputs["rotary"]):
            with self.subTest(case=name):
                hf = hf_config(family, config)
                _, module_cls, apply_rotary_pos_emb = FAMILIES[family]
                rope_type = hf.rope_parameters["rope_type"]
                init_fn = module_cls.compute_default_rope_parameters if rope_type == "default" \
                    else ROPE_INIT_FUNCTIONS[rope_type]
                inv_freq, scaling = init_fn(hf)
                self.close("init inv_freq", case_out["init_inv_freq"], inv_freq, 0, 1e-6)
                self.assertAlmostEqual(case_out["init_attention_scaling"], float(scaling), places=12)
                module = module_cls(hf)
                for call_in, call_out in zip(case_in["calls"], case_out["calls"]):
                    positions = torch.tensor(call_in["positions"])
                    x = torch.tensor(call_in["x"]["data"], dtype=torch.float64).reshape(call_in["x"]["shape"])
                    x = x.to(torch.float32 if call_in["x"]["dtype"] == "float32" else torch.float64)
                    cos, sin = module(x, positions)  # float32 tables cast to x's dtype
                    cos32, sin32 = module(x.float(), positions)
                    self.close("inv_freq after each call", call_out["inv_freq"], module.inv_freq, 0, 1e-6)
                    self.assertAlmostEqual(call_out["attention_scaling"], float(module.attention_scaling), places=12)
                    self.close("cos", call_out["cos"], cos32, 1e-6)
                    self.close("sin", call_out["sin"], sin32, 1e-6)
                    rotated, _ = apply_rotary_pos_emb(x, x, cos, sin)
                    key = f"rotated {call_in['x']['dtype']}"
                    self.close(key, call_out["rotated"], rotated, 1e-5, 1e-6)

    def test_rms_norm_llama_and_gemma(self):
        for (kind, dtype, x, w, eps), out in zip(self.norm_cases, self.outputs["rms_norm"]):
            with self.subTest(kind=kind, dtype=str(dtype)):
                if kind == "llama":
                    module = modeling_llama.LlamaRMSNorm(x.shape[-1], eps=eps)
                else:
                    module = Gemma3RMSNorm(x.shape[-1], eps=eps)
                module = module.to(dtype)
                with torch.no_grad():
                    module.weight.copy_(w)
                    want = module(x)
                self.assertEqual(out["dtype"], {torch.float32: "Float", torch.float64: "Double",
                                                torch.bfloat16: "BFloat16"}[dtype])
                if dtype == torch.float64:
                    # transformers rounds float64 input to float32 (attnkit keeps float64).
                    self.close(f"rms_norm {kind} float64", out["out"], want, 1e-5, 1e-6)
                elif dtype == torch.bfloat16:
                    # Same float32 arithmetic; a last-bit difference of float32 may round to another bf16.
                    got = torch.tensor(out["out"]).reshape(want.shape)
                    mismatch = (got != want.double()).double().mean().item()
                    self.worst[f"rms_norm {kind} bfloat16 share of unequal values"] = mismatch
                    self.assertLessEqual(mismatch, 0.01)
                    self.close(f"rms_norm {kind} bfloat16", out["out"], want, 0, 0.01)
                else:
                    self.close(f"rms_norm {kind} float32", out["out"], want, 2e-6, 1e-6)


if __name__ == "__main__":
    runner.run()
