#!/usr/bin/python3
"""`attnkit analyze collapse` checked from the outside with python3-torch 1.13, in float64.

Run: /usr/bin/python3 tests/python/test_rank_collapse.py --build-dir BUILD

The command saves every variant's layer outputs (--save-layer-outputs); here the residual
X - 1 mean(X)^T, the norms ||.||_1 (max column abs sum), ||.||_inf (max row abs sum), the composite
sqrt(||.||_1 ||.||_inf) and Frobenius, their per-layer spreads over the inputs, the fits of the
log residual, and the exact path counts C(L,k) H^k are recomputed independently and compared with
collapse.json. Also: the SVGs are well-formed XML, and bad arguments give one-line errors.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import hf_reference as hf  # noqa: E402  (its safetensors reader)
import runner  # noqa: E402

BUILD_DIR = "build"
LAYERS, HEADS, HIDDEN, SAMPLES, SEQ = 4, 2, 16, 5, 9
KINDS = ["softmax", "linear:elu", "cosformer", "synthesizer-random"]


def attnkit(*args):
    return subprocess.run([os.path.join(BUILD_DIR, "attnkit"), *args], capture_output=True,
                          text=True)


def residual(x):
    return x - x.mean(dim=0, keepdim=True)


def norm_1(x):
    return x.abs().sum(dim=0).max().item()


def norm_inf(x):
    return x.abs().sum(dim=1).max().item()


def composite(x):
    return math.sqrt(norm_1(x) * norm_inf(x))


def measures(x):
    """x [n, d] float64 -> the four per-input numbers collapse.json summarises."""
    r = residual(x)
    return {
        "composite": composite(r),
        "frobenius": torch.linalg.norm(r).item(),
        "relative_composite": composite(r) / composite(x),
        "relative_frobenius": torch.linalg.norm(r).item() / torch.linalg.norm(x).item(),
    }


def fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    return sxy / sxx


class RankCollapseCommand(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.tmp.name, "run")
        cls.saved = os.path.join(cls.tmp.name, "layers.safetensors")
        r = attnkit("--quiet", "--seed", "7", "analyze", "collapse", "--random", "bert",
                    "--layers", str(LAYERS), "--heads", str(HEADS), "--hidden", str(HIDDEN),
                    "--init-std", "0.2", "--seeds", "1", "--samples", str(SAMPLES), "--seq-len",
                    str(SEQ), "--kind", ",".join(KINDS), "--subsets", "2", "--out", cls.out,
                    "--save-layer-outputs", cls.saved)
        if r.returncode != 0:
            raise RuntimeError(f"attnkit failed ({r.returncode}): {r.stderr}")
        with open(os.path.join(cls.out, "collapse.json")) as f:
            cls.report = json.load(f)
        cls.tensors = hf.load_safetensors(cls.saved)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def result(self, kind):
        for r in self.report["results"]:
            if r["kind"] == kind:
                return r
        self.fail(f"no result for {kind}")

    def test_residuals_and_norms_match_float64_recomputation(self):
        checked = 0
        for kind in KINDS:
            result = self.result(kind)
            safe = kind.replace(":", "_")
            self.assertEqual(len(result["variants"]), 5)
            for variant in result["variants"]:
                self.assertEqual(len(variant["layers"]), LAYERS + 1)
                for entry in variant["layers"]:
                    x = self.tensors[f"{safe}/{variant['name']}/layer_{entry['layer']}"]
                    self.assertEqual(x.dtype, torch.float64)
                    self.assertEqual(tuple(x.shape), (SAMPLES, SEQ, HIDDEN))
                    per_input = [measures(x[b]) for b in range(SAMPLES)]
                    for key in ("composite", "frobenius", "relative_composite",
                                "relative_frobenius"):
                        values = [m[key] for m in per_input]
                        spread = entry[key]
                        self.assertEqual(spread["count"], SAMPLES)
                        for stat, want in (("mean", sum(values) / len(values)),
                                           ("min", min(values)), ("max", max(values)),
                                           ("median", sorted(values)[SAMPLES // 2])):
                            got = spread[stat]
                            self.assertLessEqual(abs(got - want), 1e-9 * abs(want) + 1e-300,
                                                 f"{kind} {variant['name']} layer {entry['layer']} "
                                                 f"{key} {stat}: {got} vs {want}")
                            checked += 1
        self.assertGreater(checked, 1000)

    def test_same_embedding_output_for_every_variant(self):
        for kind in KINDS:
            safe = kind.replace(":", "_")
            first = self.tensors[f"{safe}/pure_attention/layer_0"]
            for name in ("attention_skip", "attention_mlp", "attention_layer_norm", "full_block"):
                self.assertTrue(torch.equal(first, self.tensors[f"{safe}/{name}/layer_0"]))

    def test_fits_match(self):
        for kind in KINDS:
            for variant in self.result(kind)["variants"]:
                geo = [10 ** e["relative_composite"]["log10_mean"] for e in variant["layers"]]
                pts = [(l, math.log(r)) for l, r in enumerate(geo) if r > 1e-13]
                f = variant["fit"]
                self.assertEqual(f["layers_above_floor"], len(pts))
                if len(pts) >= 2:
                    slope = fit([p[0] for p in pts], [p[1] for p in pts])
                    self.assertAlmostEqual(f["exponential_rate_per_layer"], math.exp(slope),
                                           places=9)

    def test_bound_only_for_softmax(self):
        softmax = self.result("softmax")["bound"]
        self.assertTrue(softmax["available"])
        self.assertEqual(len(softmax["layers"]), LAYERS + 1)
        for entry in softmax["layers"][1:]:
            self.assertGreater(entry["beta"]["mean"], 0)
            # log10 of the measured pure-attention residual equals the composite residual's.
        pure = next(v for v in self.result("softmax")["variants"] if v["name"] == "pure_attention")
        for entry, layer in zip(softmax["layers"], pure["layers"]):
            self.assertAlmostEqual(entry["log10_measured"]["max"],
                                   math.log10(layer["composite"]["max"]), places=9)
        for kind in KINDS[1:]:
            bound = self.result(kind)["bound"]
            self.assertFalse(bound["available"])
            self.assertIn("softmax", bound["reason"])

    def test_path_counts_exact(self):
        paths = self.report["paths"]
        self.assertEqual(paths["layers"], LAYERS)
        self.assertEqual(paths["heads"], HEADS)
        self.assertEqual(int(paths["total"]), (1 + HEADS) ** LAYERS)
        total = 0
        for entry in paths["lengths"]:
            want = math.comb(LAYERS, entry["k"]) * HEADS ** entry["k"]
            self.assertEqual(int(entry["count"]), want)
            total += want
        self.assertEqual(total, (1 + HEADS) ** LAYERS)

    def test_short_paths_full_depth_is_the_full_model(self):
        for kind in KINDS:
            sp = self.result(kind)["short_paths"]
            self.assertEqual([e["k"] for e in sp], list(range(LAYERS + 1)))
            self.assertLess(sp[-1]["relative_distance"]["max"], 1e-12)
            self.assertEqual(sp[0]["subsets"], 1)
            self.assertEqual(sp[1]["subsets"], 2)

    def test_svgs_are_well_formed(self):
        names = sorted(os.listdir(self.out))
        for kind in KINDS:
            safe = kind.replace(":", "_")
            self.assertIn(f"residual_{safe}.svg", names)
            self.assertIn(f"short_paths_{safe}.svg", names)
        self.assertIn("path_lengths.svg", names)
        self.assertIn("kinds_pure_attention.svg", names)
        for name in names:
            if name.endswith(".svg"):
                root = ET.parse(os.path.join(self.out, name)).getroot()
                self.assertTrue(root.tag.endswith("svg"), name)


class RankCollapseOnHuggingFaceDirectories(unittest.TestCase):
    """--model on tiny HF-layout BERT / ALBERT / GPT-2 directories: the full block's layer outputs
    equal the independent float64 reference forward's hidden states (GPT-2's last one is after
    ln_f there and not compared), and the residuals are those of these outputs."""

    def run_model(self, model_type, **sizes):
        with tempfile.TemporaryDirectory() as tmp:
            model_dir, out = os.path.join(tmp, "model"), os.path.join(tmp, "out")
            made = hf.make_model_dir(model_type, model_dir, seed=4, **sizes)
            saved = os.path.join(tmp, "layers.safetensors")
            r = attnkit("--quiet", "analyze", "collapse", "--model", model_dir, "--samples", "3",
                        "--seq-len", "7", "--subsets", "1", "--out", out,
                        "--save-layer-outputs", saved)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "collapse.json")) as f:
                report = json.load(f)
            tensors = hf.load_safetensors(saved)
            cfg = made["config"]
        result = report["results"][0]
        safe = result["kind"].replace(":", "_")
        ids = tensors[f"{safe}/input_ids"]
        ref = hf.forward(cfg, made["weights"], ids)
        layers = result["layers"]
        compared = layers if model_type != "gpt2" else layers - 1
        for i in range(compared + 1):
            ours = tensors[f"{safe}/full_block/layer_{i}"]
            err = (ours - ref[f"hidden_states.{i}"]).abs().max().item()
            self.assertLess(err, 1e-9, f"{model_type} layer {i}")
            entry = next(v for v in result["variants"] if v["name"] == "full_block")["layers"][i]
            want = max(measures(ours[b])["relative_frobenius"] for b in range(3))
            self.assertAlmostEqual(entry["relative_frobenius"]["max"], want, places=12)
        return result

    def test_bert(self):
        result = self.run_model("bert", num_hidden_layers=3)
        self.assertEqual(result["kind"], "softmax")
        self.assertTrue(result["bound"]["available"])

    def test_albert_shared_layers(self):
        result = self.run_model("albert", num_hidden_layers=3)
        self.assertEqual(result["layers"], 3)

    def test_random_weights_of_a_models_shape(self):
        """--random MODEL: random weights drawn for the model's own config, the same draws as
        --random with that config as a JSON file (not the model's weights), and the model's
        tokenizer for --data."""
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = os.path.join(tmp, "model")
            hf.make_model_dir("gpt2", model_dir, seed=4, n_layer=3)
            words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "alpha", "beta", "gamma", "delta"]
            with open(os.path.join(model_dir, "vocab.txt"), "w") as f:
                f.write("\n".join(words) + "\n")
            data = os.path.join(tmp, "data.txt")
            with open(data, "w") as f:
                f.write("\n".join("alpha beta gamma delta " * 4 for _ in range(6)) + "\n")
            converted = os.path.join(tmp, "attnkit")
            r = attnkit("--quiet", "convert", "--from", model_dir, "--to", converted, "--format", "attnkit")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(converted, "config.json")) as f:
                config = json.load(f)["model"]
            config_file = os.path.join(tmp, "config.json")
            with open(config_file, "w") as f:
                json.dump(config, f)
            reports = {}
            for name, args in (("model", ["--random", model_dir]),
                               ("config", ["--random", config_file, "--tokenizer", model_dir]),
                               ("trained", ["--model", model_dir])):
                out = os.path.join(tmp, name)
                r = attnkit("--quiet", "--seed", "3", "analyze", "collapse", *args, "--seeds", "2"
                            if name != "trained" else "1", "--samples", "3", "--seq-len", "8", "--data", data,
                            "--no-short-paths", "--out", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(os.path.join(out, "collapse.json")) as f:
                    reports[name] = json.load(f)
        self.assertEqual(reports["model"]["results"], reports["config"]["results"])
        self.assertEqual(reports["model"]["results"][0]["models"], 2)
        self.assertEqual((reports["model"]["results"][0]["layers"], reports["model"]["results"][0]["heads"]),
                         (3, reports["trained"]["results"][0]["heads"]))
        self.assertIn(f"tokenizer {model_dir}", reports["model"]["inputs"]["source"])
        self.assertEqual(reports["model"]["inputs"]["source"], reports["trained"]["inputs"]["source"])
        pure = lambda rep: next(v for v in rep["results"][0]["variants"]  # noqa: E731
                                if v["name"] == "pure_attention")["layers"][-1]["relative_frobenius"]["max"]
        self.assertNotEqual(pure(reports["model"]), pure(reports["trained"]))

    def test_gpt2_is_causal_so_no_bound(self):
        result = self.run_model("gpt2", n_layer=3)
        self.assertFalse(result["bound"]["available"])
        self.assertIn("causal", result["bound"]["reason"])


class RankCollapseErrors(unittest.TestCase):
    def check_error(self, args, fragment):
        with tempfile.TemporaryDirectory() as tmp:
            r = attnkit("analyze", "collapse", *args, "--out", os.path.join(tmp, "o"))
        self.assertNotEqual(r.returncode, 0)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(fragment, lines[0])

    def test_bad_arguments(self):
        self.check_error(["--random", "no-such-preset"], "neither a preset")
        self.check_error(["--random", "bert", "--kind", "quadratic"], "quadratic")
        self.check_error([], "exactly one of --model DIR and --random CONFIG")
        self.check_error(["--random", "bert", "--dtype", "int8"], "--dtype")
        self.check_error(["--random", "bert", "--variants", "nope"], "pure_attention")
        self.check_error(["--random", "bert", "--data", "/nonexistent.txt"], "tokenizer")
        self.check_error(["--model", "/nonexistent-model-dir"], "nonexistent-model-dir")
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "config.json")
            with open(bad, "w") as f:
                f.write('{"layerz": 3}')
            self.check_error(["--random", bad], f"--random {bad}: config: unknown key 'layerz'")
        self.check_error(["--model", "/tmp", "--kind", "softmax"], "--random stacks")


if __name__ == "__main__":
    BUILD_DIR = runner.build_dir()
    runner.run()
