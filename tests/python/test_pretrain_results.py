"""bench/pretrain_results.py (issue 32's experiment driver) without training anything: its data
rewriting, curves, safetensors reading, CPU plan, report block (smoke runs marked, the block
replaced in place, earlier text kept) and the refusal to write a smoke run into docs/."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import runner

BUILD = runner.build_dir()
ROOT = runner.ROOT
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pretrain_results as pr  # noqa: E402


def read(path):
    with open(path) as f:
        return f.read()


def fake_cell(steps, loss, test=None):
    cell = {"steps": steps, "train_cpu_s": steps * 0.5, "step_cpu_ms": 500.0, "process_cpu_s": steps * 0.7,
            "wall_s": steps * 1.0, "peak_rss_mib": 700.0, "final_train_loss": loss,
            "final_eval": {"loss": loss, "perplexity": 2.718281828 ** loss, "masked_accuracy": 0.25,
                           "token_accuracy": 0.3},
            "train_curve": [[s, s * 0.5, loss + 1.0 / s] for s in range(1, steps + 1)],
            "eval_curve": [[steps, steps * 0.5, {"loss": loss}]]}
    if test is not None:
        cell["test"] = {"accuracy": test, "step": steps}
    return cell


def fake_summary(budget, finetune_budget=180):
    cells = {name: fake_cell(10, 6.0, test=0.5 if name.startswith("ft-") else None) for name in pr.CELLS}
    cells["ft-linear-elu-scratch"] = {"cell": "ft-linear-elu-scratch", "failed": "attnkit: error: something"}
    return {"budget_cpu_s": budget, "finetune_budget_cpu_s": finetune_budget, "smoke": budget < pr.SMOKE_BUDGET,
            "date": "2026-01-01 00:00 UTC", "machine": "test machine", "data": {}, "cells": cells,
            "plots": {"mlm_steps": "images/pretrain-mlm-steps.svg"},
            "samples": {"cloze": {"mlm-softmax": [{"masked": "a [MASK] b", "answers": ["x"], "predicted": ["y"]}]},
                        "generation": {"lm": [{"prompt": "The", "text": "The end", "error": None}],
                                       "plm-two-stream": [{"prompt": "The", "text": None, "error": "refused"}]},
                        "conditional": {"people": {"samples": 3, "classified_as_condition": 2 / 3,
                                                   "examples": ["a | b"]},
                                        "science": {"error": "every sample was empty"}}},
            "collapse": {"settings": pr.COLLAPSE,
                         "trained": {"softmax": {"variants": {"pure_attention": {"log10": [-0.2, -3.0],
                                                                                 "vanished_at": None}}}},
                         "random": {"cosformer": {"variants": {"pure_attention": {"log10": [-0.2, -99.0],
                                                                                  "vanished_at": 1}}}}}}


class PretrainResults(unittest.TestCase):
    def test_plain_text_unescapes_lra_text_passages(self):
        self.assertEqual(pr.plain_text(r"one\ntwo\tthree \\n  four"), r"one two three \n four")

    def test_evaluations_take_the_cpu_seconds_of_their_step(self):
        records = [{"step": 5, "loss": 3.0, "cpu_seconds": 2.5}, {"step": 10, "loss": 2.0, "cpu_seconds": 5.0},
                   {"step": 10, "eval": {"loss": 2.2}}, {"step": 12, "eval": {"loss": 2.1}},
                   {"step": 15, "loss": 1.5, "cpu_seconds": 7.5}]
        train, evals = pr.curves(records)
        self.assertEqual(train, [[5, 2.5, 3.0], [10, 5.0, 2.0], [15, 7.5, 1.5]])
        self.assertEqual(evals, [[10, 5.0, {"loss": 2.2}], [12, 5.0, {"loss": 2.1}]])

    def test_reads_a_float32_tensor_and_its_row_maxima(self):
        values = [0.5, 2.0, -1.0, 3.0, 0.0, 1.0]
        data = struct.pack("<6f", *values)
        header = json.dumps({"mlm_logits": {"dtype": "F32", "shape": [1, 2, 3], "data_offsets": [0, len(data)]}})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(header)) + header.encode() + data)
            flat, shape = pr.read_safetensors(path, "mlm_logits")
        self.assertEqual(shape, [1, 2, 3])
        self.assertEqual(list(flat), values)
        self.assertEqual([pr.argmax_row(flat, r, 3) for r in range(2)], [1, 0])

    def test_run_times_add_the_parts_and_skip_a_killed_one(self):
        import gnu_time
        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "time-0.txt"), "w").close()  # killed: /usr/bin/time wrote nothing
            for part in (1, 2):
                subprocess.run(["/usr/bin/time", "-v", "-o", os.path.join(tmp, f"time-{part}.txt"), sys.executable,
                                "-c", "sum(range(5000000))"], check=True)
            one = gnu_time.read_gnu_time(os.path.join(tmp, "time-1.txt"))
            two = gnu_time.read_gnu_time(os.path.join(tmp, "time-2.txt"))
            cpu, wall, peak = gnu_time.read_run_times(tmp)
        self.assertGreater(one[0], 0.0)
        self.assertAlmostEqual(cpu, one[0] + two[0])
        self.assertAlmostEqual(wall, one[1] + two[1])
        self.assertEqual(peak, max(one[2], two[2]))

    def test_runs_that_shared_their_core_are_named(self):
        import gnu_time
        self.assertAlmostEqual(gnu_time.cpu_share({"process_cpu_s": 30.0, "wall_s": 60.0}), 0.5)
        self.assertIsNone(gnu_time.cpu_share({"steps": 3}))  # a failed or older record
        self.assertEqual(gnu_time.shared_runs({"a": 0.5, "b": 0.99, "c": None, "d": 0.85}), "a 0.50, d 0.85")
        self.assertEqual(gnu_time.shared_runs({"a": 0.95}), "")

    def test_plan_counts_every_cell_once(self):
        # 11 pretraining cells and 10 fine-tuning cells; mlm-softmax is needed by a, b, c, d and e.
        self.assertEqual(pr.planned_cpu(600, 180, pr.EXPERIMENTS), 11 * 600 + 10 * 180)
        self.assertEqual(pr.planned_cpu(600, 180, ["b"]), 4 * 600 + 8 * 180)
        self.assertEqual(len(pr.needed(pr.EXPERIMENTS)), len(pr.CELLS))
        # --kinds leaves (a)'s other MLM cells out, unless another experiment needs them.
        three = ["softmax", "cosformer", "linear:relu"]
        self.assertEqual(pr.wanted(["a"], three), ["mlm-softmax", "mlm-cosformer", "mlm-linear-relu"])
        self.assertEqual(pr.planned_cpu(3600, 180, ["a"], three), 3 * 3600)
        self.assertIn("mlm-linear-elu", pr.wanted(["a", "b"], three))

    def test_report_block_is_replaced_in_place_and_smoke_runs_say_so(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "results.md"), "w") as f:
                f.write("# Results\n\nearlier text\n\n" + pr.BEGIN + "\nold block\n" + pr.END + "\n\nlater text\n")
            pr.write_docs(fake_summary(600), pr.EXPERIMENTS, tmp)
            pr.write_docs(fake_summary(600), pr.EXPERIMENTS, tmp)
            text = read(os.path.join(tmp, "results.md"))
            self.assertEqual(text.count(pr.BEGIN), 1)
            self.assertNotIn("old block", text)
            self.assertTrue(text.startswith("# Results\n\nearlier text\n"))
            self.assertTrue(text.rstrip().endswith("later text"))
            self.assertNotIn("SMOKE RUN", text)
            self.assertIn("| ft-albert-unshared | 50.0 |", text)
            self.assertIn("| linear:elu | 50.0 | failed |", text)
            self.assertIn("(refused: refused)", text)
            self.assertIn("`a \\| b`", text)  # a table cell keeps its column
            self.assertIn("failed: every sample was empty", text)
            self.assertIn("layer 1", text)  # where X vanished
            self.assertEqual(json.loads(read(os.path.join(tmp, "pretrain-results.json")))["budget_cpu_s"], 600)
            main = text[text.index(pr.BEGIN):text.index(pr.END)]

            # Another budget is a study of its own: its JSON, its region (appended), the main one kept.
            smoke = fake_summary(5, 5)
            smoke["mlm_comparisons"] = [{"a": "cosformer", "b": "softmax", "difference": -12.5, "low": -20.0,
                                         "high": -5.0, "verdict": "a", "items": 174, "a_perplexity": 400.0,
                                         "b_perplexity": 412.5},
                                        {"a": "linear:relu", "b": "softmax", "difference": 1.0, "low": -2.0,
                                         "high": 4.0, "verdict": "level", "items": 174, "a_perplexity": 413.5,
                                         "b_perplexity": 412.5}]
            smoke["cells"]["mlm-softmax"]["mask_input_eval"] = {"mask_input_perplexity": 636.0, "mask_input_accuracy": 0.0559,
                                                                "unigram_perplexity": 790.4, "unigram_accuracy": 0.0598}
            smoke["study_kinds"] = ["softmax", "cosformer", "linear:relu"]
            smoke["cells"]["mlm-cosformer"]["process_cpu_s"] = 1.0  # an interrupted process: not in the sum
            smoke["cells"]["mlm-softmax"]["machine"] = "machine A"
            smoke["cells"]["mlm-cosformer"]["machine"] = "machine B"
            pr.write_docs(smoke, ["a"], tmp)
            text = read(os.path.join(tmp, "results.md"))
            begin, end = pr.markers(5, 5)
            self.assertEqual(begin, "<!-- pretrain-results-b5-f5:begin -->")
            self.assertEqual(text[text.index(pr.BEGIN):text.index(pr.END)], main)
            block = text[text.index(begin):text.index(end)]
            self.assertIn("SMOKE RUN", block)
            self.assertIn("## Pretraining at 5 CPU s per cell", block)
            self.assertIn("(174 blocks with masked tokens", block)
            self.assertIn("| cosformer − softmax | 400.0 / 412.5 | -12.5 [-20.0, -5.0] | cosformer better |", block)
            self.assertIn("| linear:relu − softmax | 413.5 / 412.5 | +1.0 [-2.0, +4.0] | level |", block)
            self.assertIn("images/pretrain-mlm-steps.svg", block)
            # The [MASK]-input table: only the cells that have the evaluation.
            self.assertIn("| softmax | 636.0 | 790.4 | 5.6% | 6.0% |", block)
            self.assertNotIn("| cosformer | 636.0", block)
            self.assertNotIn("perplexity at [MASK]", main)
            self.assertIn("**These cells ran on different machines** (softmax: machine A; cosformer: machine B; "
                          "linear:relu: not recorded", block)
            self.assertNotIn("different machines", main)
            self.assertIn("**Some cells shared their core** (CPU seconds per wall second: softmax 0.70, "
                          "cosformer 0.10, linear:relu 0.70;", block)
            self.assertNotIn("### (b)", block)
            self.assertIn("1 CPU s / 10 s wall in the processes that ended (an interrupted one is not counted)", block)
            self.assertIn("7 CPU s / 10 s wall in all", block)
            # --kinds: the table shows those kinds, and the command to reproduce it says so.
            self.assertNotIn("| linear:elu |", block)
            self.assertIn("--experiments a --kinds softmax,cosformer,linear:relu` (0.0 CPU hours", block)
            self.assertEqual(json.loads(read(os.path.join(tmp, "pretrain-results-b5-f5.json")))["budget_cpu_s"], 5)

    def test_a_smoke_run_is_refused_for_the_repository_docs(self):
        before = read(os.path.join(ROOT, "docs", "results.md"))
        done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "pretrain_results.py"), "--budget", "5",
                               "--report-only", "--build", "/nonexistent"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("smoke run", done.stderr)
        self.assertEqual(read(os.path.join(ROOT, "docs", "results.md")), before)

    def test_report_only_without_runs_renders_the_json(self):
        """--report-only where neither runs nor records exist (another machine) re-renders the
        study's region from its JSON, numbers kept, instead of writing empty tables."""
        runs = os.path.join(ROOT, "runs", "pretrain-b7777-f180")
        self.assertFalse(os.path.exists(runs))
        with tempfile.TemporaryDirectory() as tmp:
            summary = fake_summary(7777)
            summary["experiments"] = ["a"]
            pr.write_docs(summary, ["a"], tmp)
            begin, end = pr.markers(7777, 180)
            with open(os.path.join(tmp, "results.md")) as f:
                text = f.read()
            with open(os.path.join(tmp, "results.md"), "w") as f:
                f.write(text.replace(text[text.index(begin):text.index(end)], begin + "\nstale\n"))
            done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "pretrain_results.py"), "--budget", "7777",
                                   "--experiments", "a", "--report-only", "--docs", tmp, "--store", tmp,
                                   "--build", os.path.abspath(BUILD)],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("re-rendered from pretrain-results-b7777-f180.json", done.stderr + done.stdout)
            self.assertEqual(read(os.path.join(tmp, "results.md")), text)
        self.assertFalse(os.path.exists(runs))

    def test_plan_prints_the_cells_and_runs_nothing(self):
        runs = os.path.join(ROOT, "runs", "pretrain-b7777-f180")
        shutil.rmtree(runs, ignore_errors=True)
        done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "pretrain_results.py"), "--budget", "7777",
                               "--plan", "--experiments", "c"], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([line.split()[0] for line in done.stdout.splitlines()[:-1]],
                         ["mlm-softmax", "lm", "plm-one-stream", "plm-two-stream"])
        self.assertIn(f"total: {4 * 7777 / 3600:.2f} CPU hours", done.stdout)
        self.assertFalse(os.path.exists(runs))


if __name__ == "__main__":
    runner.run()
