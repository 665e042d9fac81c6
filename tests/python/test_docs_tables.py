#!/usr/bin/python3
"""Generated numbers stay generated (issue 44): the parts of docs/results.md that the experiment
drivers write from their JSON (bench/lra_results.py: docs/lra-results.json between the
lra-results markers; bench/pretrain_results.py: docs/pretrain-results.json between the
pretrain-results markers), of docs/analysis.md that bench/pretrained_heads_results.py writes
from docs/pretrained-heads.json (between the pretrained-heads markers), and of
docs/training-benchmarks.md that bench/train_compare.py writes from docs/training-benchmarks.json
(and the other drivers' regions the tests below name), must be exactly what the driver's markdown() renders from that JSON now. A table edited by hand, a JSON changed without the table, or a renderer changed without
re-rendering fails here; the message names the first differing line. Fix: run the driver with
--report-only (it re-renders from the finished cells) and commit both files."""
import difflib
import importlib.util
import json
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import runner  # noqa: E402

ROOT = runner.ROOT
runner.build_dir()  # not used: the test reads files only
sys.path.insert(0, os.path.join(ROOT, "bench"))


def driver(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def region(text, begin, end):
    """The text from `begin` through `end` (markers included), as the drivers write it."""
    assert begin in text and end in text, f"markers {begin} / {end} missing"
    head, rest = text.split(begin, 1)
    return begin + rest.split(end, 1)[0] + end


class DocsTables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "docs", "results.md")) as f:
            cls.results = f.read()

    def check(self, module, rendered, begin=None, end=None):
        begin, end = begin or module.BEGIN, end or module.END
        doc = region(self.results, begin, end)
        want = region(rendered, begin, end)
        if doc != want:
            diff = next(d for d in difflib.unified_diff(doc.splitlines(), want.splitlines(), lineterm="", n=0)
                        if d.startswith(("-", "+")) and not d.startswith(("---", "+++")))
            self.fail(f"docs/results.md differs from {module.__name__}.markdown() of its JSON: first "
                      f"difference {diff[:300]!r}; run bench/{module.__name__}.py --report-only")

    def test_lra_table_is_its_json(self):
        lra = driver("lra_results")
        with open(os.path.join(ROOT, "docs", "lra-results.json")) as f:
            summary = json.load(f)
        self.check(lra, lra.markdown(summary))

    def test_pretraining_tables_are_their_json(self):
        pretrain = driver("pretrain_results")
        with open(os.path.join(ROOT, "docs", "pretrain-results.json")) as f:
            summary = json.load(f)
        self.check(pretrain, pretrain.markdown(summary, summary["experiments"]))

    def test_pretraining_studies_at_other_budgets_are_their_json(self):
        """Each docs/pretrain-results-bB-fF.json (a study at other budgets) has its own region of
        results.md, equal to its rendering; a region without its JSON fails too."""
        pretrain = driver("pretrain_results")
        found = set()
        for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
            if not (name.startswith("pretrain-results-") and name.endswith(".json")):
                continue
            with open(os.path.join(ROOT, "docs", name)) as f:
                summary = json.load(f)
            begin, end = pretrain.markers(summary["budget_cpu_s"], summary["finetune_budget_cpu_s"])
            found.add(begin)
            with self.subTest(json=name):
                self.assertIn(begin, self.results)
                self.check(pretrain, pretrain.markdown(summary, summary["experiments"]), begin, end)
        for begin in re.findall(r"<!-- pretrain-results-[^ ]+:begin -->", self.results):
            self.assertIn(begin, found, f"docs/results.md has {begin} but no JSON of that study")

    def check_optional(self, name, doc_name, json_path, marker, render=lambda m, r: m.markdown(r)):
        """A generated region of docs/DOC_NAME that exists once its driver has written json_path:
        without that JSON the doc must not carry `marker` (the region's first line); with it the
        region must equal render(json)."""
        module = driver(name)
        with open(os.path.join(ROOT, "docs", doc_name)) as f:
            doc = f.read()
        if not os.path.exists(json_path):  # no run written yet: then no generated part either
            self.assertNotIn(marker, doc)
            return
        with open(json_path) as f:
            results = json.load(f)
        self.assertEqual(region(doc, module.BEGIN, module.END), region(render(module, results), module.BEGIN, module.END),
                         f"docs/{doc_name} differs from bench/{name}.py's rendering of "
                         f"{os.path.relpath(json_path, ROOT)}; run it with --report-only")

    # The generated regions that exist once their driver has run: (driver, doc, JSON, first line).
    OPTIONAL_REGIONS = (
        ("pretrained_heads_results", "analysis.md", "pretrained-heads.json", "<!-- pretrained-heads:begin -->"),
        ("bible_heads_results", "analysis.md", "bible-heads.json", "<!-- bible-heads:begin -->"),
        ("classifier_heads_results", "analysis.md", "classifier-heads.json", "<!-- classifier-heads:begin -->"),
        ("bible_linearize_results", "analysis.md", "bible-linearize.json", "<!-- bible-linearize:begin -->"),
        ("lm_linearize_results", "analysis.md", "lm-linearize.json", "<!-- lm-linearize:begin -->"),
        ("pretrained_linearize_results", "analysis.md", "pretrained-linearize.json",
         "<!-- pretrained-linearize:begin -->"),
        ("listops_seeds", "results.md", "listops-seeds.json", "<!-- listops-seeds:begin -->"),
        ("finetune_seeds", "results.md", "finetune-seeds.json", "<!-- finetune-seeds:begin -->"),
        ("pruned_speed", "analysis.md", "pruned-speed.json", "<!-- pruned-speed:begin -->"),
        ("linearized_decode", "analysis.md", "linearized-decode.json", "<!-- linearized-decode:begin -->"),
        ("decode_smollm2", "decoding.md", "decode-smollm2.json", "<!-- decode-smollm2:begin -->"),
        ("decode_ct2_marian", "decoding.md", "decode-marian.json", "<!-- decode-marian:begin -->"),
        ("train_compare", "training-benchmarks.md", "training-benchmarks.json", "<!-- train-benchmarks:begin -->"),
        ("gemm_library", "benchmarks.md", "gemm-library.json", "<!-- gemm-library:begin -->"),
    )

    def test_optional_regions_are_their_json(self):
        for name, doc_name, json_name, marker in self.OPTIONAL_REGIONS:
            with self.subTest(driver=name):
                self.check_optional(name, doc_name, os.path.join(ROOT, "docs", json_name), marker)

    def test_mlm_step_table_is_its_json(self):
        path = os.path.join(ROOT, "docs", "mlm-benchmarks.json")
        self.check_optional("mlm_compare", "training-benchmarks.md", path, "from docs/mlm-benchmarks.json",
                            lambda m, r: "\n".join(m.markdown(r)))

    def test_a_changed_number_is_caught(self):
        lra = driver("lra_results")
        with open(os.path.join(ROOT, "docs", "lra-results.json")) as f:
            summary = json.load(f)
        cell = next(c for c in summary["cells"].values() if "test_accuracy" in c)
        cell["test_accuracy"] += 0.05
        doc = region(self.results, lra.BEGIN, lra.END)
        self.assertNotEqual(doc, region(lra.markdown(summary), lra.BEGIN, lra.END))

    def test_speed_verdict_needs_every_round(self):
        """Issue 44's rule (bench/bench_process.py): a target is met only when every one of >= 5
        alternating rounds reaches it, missed when none does, else not settled; fewer rounds give
        no verdict; rows of older runs without rounds keep PASS / MISS of the best times."""
        import bench_process as bp
        self.assertEqual(bp.round_verdict([1.0] * 5, [1.1, 1.2, 1.0, 1.3, 1.05])[0], "met")
        self.assertEqual(bp.round_verdict([1.0] * 5, [0.9, 0.8, 0.99, 0.7, 0.95])[0], "missed")
        self.assertEqual(bp.round_verdict([1.0] * 5, [1.2, 1.2, 0.98, 1.3, 1.1])[0], "not settled")
        self.assertEqual(bp.round_verdict([1.0] * 4, [2.0] * 4)[0], "too few rounds")
        row = {"attnkit": 1.0, "ct2": 1.5, "attnkit_cpu": 1.0, "ct2_cpu": 1.5,
               "attnkit_rounds": [1.0, 1.1, 1.0, 1.2, 1.0], "ct2_rounds": [1.5, 1.5, 1.6, 1.1, 0.9]}
        line = bp.ct2_target_line(row, "x")
        self.assertIn("best 1.50x", line)
        self.assertIn("rounds 0.90x-1.60x over 5: NOT SETTLED", line)
        del row["attnkit_rounds"], row["ct2_rounds"]
        self.assertIn("1.50x PASS", bp.ct2_target_line(row, "x"))


if __name__ == "__main__":
    runner.run()
