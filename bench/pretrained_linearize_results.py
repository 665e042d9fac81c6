#!/usr/bin/python3
"""Linearizing a pretrained language model (issue 45 part 4: "... and SmolLM2 when it loads,
perplexity on held-out text against CPU time"): the part of docs/analysis.md between its
pretrained-linearize markers, written from the finished cells of scripts/pretrained_linearize.sh,
and its numbers in docs/pretrained-linearize.json.

    bash scripts/pretrained_linearize.sh build                      # SmolLM2-135M: linear:hedgehog, softmax
    /usr/bin/python3 bench/pretrained_linearize_results.py --run runs/smollm2-linearize --build build
    /usr/bin/python3 bench/pretrained_linearize_results.py --report-only   # re-render from the JSON

The script leaves each cell's per-block items on the test books (`attnkit eval --split test
--examples 0 --items`) for the checkpoint stage 2 chose on validation blocks (`best`) and for the
model the cell started from (`init`: the student after stage 1; for the softmax control, the
teacher itself). This driver adds the paired bootstraps (`attnkit eval --paired-bs`, sacreBLEU's
resampling over the test blocks, 1,000 resamples, 95%; "level" unless the interval excludes 0) of
each model against the teacher and of the student against the control, and renders the table
from the JSON alone (tests/python/test_docs_tables.py checks the doc against markdown(json))."""
import datetime
import json
import math
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bible_heads_results import cpu_seconds_by_step  # noqa: E402
from gnu_time import machine, read_gnu_time, results_driver_main  # noqa: E402
from lm_linearize_results import curve, paired, paired_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- pretrained-linearize:begin -->", "<!-- pretrained-linearize:end -->"
JSON_PATH = os.path.join(ROOT, "docs", "pretrained-linearize.json")


def items_perplexity(path):
    """A --items file's blocks, tokens and corpus perplexity."""
    items = json.load(open(path))
    values = items["values"]
    return items["items"], int(sum(values[1::2])), math.exp(sum(values[0::2]) / sum(values[1::2]))


def summarize(out_dir, build):
    control = os.path.join(out_dir, "softmax")
    teacher_items = os.path.join(control, "test-items-init.json")
    if not os.path.exists(teacher_items):
        sys.exit(f"pretrained_linearize_results: no {teacher_items} (the softmax control's cell is not finished)")
    blocks, tokens, teacher_ppl = items_perplexity(teacher_items)
    config = json.load(open(os.path.join(out_dir, "teacher", "config.json")))
    summary = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
               "teacher": {"test_perplexity": teacher_ppl, "test_blocks": blocks, "test_tokens": tokens,
                           "layers": config.get("model", config).get("layers")},
               "cells": []}
    for name in sorted(os.listdir(out_dir), key=lambda n: (n != "softmax", n)):
        cell = os.path.join(out_dir, name)
        run = os.path.join(cell, "run")
        best = os.path.join(cell, "test-items-best.json")
        if name == "teacher" or not os.path.exists(best) or not os.path.exists(os.path.join(cell, "test-items-init.json")):
            continue
        entry = {"cell": name, "kind": "softmax" if name == "softmax" else name.replace("linear-", "linear:", 1)}
        stage1 = 0.0
        transfer_path = os.path.join(cell, "student", "transfer.json")
        if os.path.exists(transfer_path):
            transfer = json.load(open(transfer_path))
            stage1, _, peak1 = read_gnu_time(os.path.join(cell, "linearize.time"))
            entry["stage1"] = {"steps": transfer["steps"], "batch": transfer["batch_size"], "trained": transfer["trained"],
                               "held_out_before": transfer["total"]["initial"],
                               "held_out_after": transfer["total"]["final"], "cpu_s": stage1, "peak_mib": peak1}
            _, _, entry["after_stage1_perplexity"] = items_perplexity(os.path.join(cell, "test-items-init.json"))
            entry["after_stage1_vs_teacher"] = paired(build, run, teacher_items,
                                                      os.path.join(cell, "paired-init-vs-teacher.json"), "init")
        cpu_at = cpu_seconds_by_step(run)
        _, _, peak2 = read_gnu_time(os.path.join(cell, "train.log.time"))
        entry["stage2"] = {"steps": max(cpu_at), "cpu_s": cpu_at[max(cpu_at)], "peak_mib": peak2,
                           "curve": curve(run, stage1)}
        n, _, entry["test_perplexity"] = items_perplexity(best)
        if n != blocks:
            sys.exit(f"pretrained_linearize_results: {name} scored {n} test blocks, the teacher {blocks}")
        entry["vs_teacher"] = paired(build, run, teacher_items, os.path.join(cell, "paired-vs-teacher.json"))
        if name != "softmax" and os.path.exists(os.path.join(control, "test-items-best.json")):
            entry["vs_control"] = paired(build, run, os.path.join(control, "test-items-best.json"),
                                         os.path.join(cell, "paired-vs-control.json"))
        summary["cells"].append(entry)
    return summary


def markdown(s):
    t = s["teacher"]
    lines = [BEGIN, "",
             f"Teacher: SmolLM2-135M-Instruct (its GGUF file converted to attnkit's format, float32; "
             f"{t['layers']} layers), untrained here: test perplexity **{t['test_perplexity']:.2f}** on all "
             f"{t['test_blocks']} blocks of 128 tokens ({t['test_tokens']:,} tokens) of the held-out test books "
             "of the leak-free Bible split (English, SmolLM2's own tokenizer). Each cell (`scripts/pretrained_linearize.sh`): "
             "`attnkit linearize` of every layer (stage 1: attention transfer of the feature maps alone, held-out "
             "transfer loss on the validation books, summed over the layers), then `attnkit train --init` (stage 2: "
             "every weight, blocks of 128 tokens of the training books, cosine from lr 1e-4; the checkpoint "
             "with the best validation perplexity); the softmax control is the teacher fine-tuned the same way. "
             f"Machine: {s['machine']}; one thread per process, niced beside other work. Differences are model − "
             "baseline in test perplexity by the paired bootstrap over the test blocks (`attnkit eval --paired-bs`, "
             "1,000 resamples, 95%); \"level\" where the interval covers 0. Generated "
             f"{s['date']} by `bench/pretrained_linearize_results.py`.", "",
             "| kind | stage 1: steps × batch, held-out loss, CPU min | test perplexity after stage 1 (− teacher) "
             "| stage 2: steps, CPU min | validation perplexity at each evaluation (CPU min since stage 1 began) "
             "| test perplexity | − teacher [95%] | − softmax control [95%] |",
             "|---|---|---|---|---|---|---|---|"]
    for c in s["cells"]:
        st1 = c.get("stage1")
        stage1 = ("—" if st1 is None else
                  f"{st1['steps']} × {st1['batch']}, {st1['held_out_before']:.4g}"
                  + (f" → {st1['held_out_after']:.4g}" if st1["trained"] else " (no map to train)")
                  + f", {st1['cpu_s'] / 60:.1f}")
        after1 = ("—" if st1 is None else
                  f"{c['after_stage1_perplexity']:.2f} ({paired_text(c['after_stage1_vs_teacher'])})")
        st2 = c["stage2"]
        points = " / ".join(f"{ppl:.2f} ({cpu / 60:.1f})" for _, cpu, ppl in st2["curve"])
        control = paired_text(c["vs_control"]) if "vs_control" in c else "—"
        lines.append(f"| `{c['kind']}` | {stage1} | {after1} | {st2['steps']}, {st2['cpu_s'] / 60:.1f} | {points} "
                     f"| {c['test_perplexity']:.2f} | {paired_text(c['vs_teacher'])} | {control} |")
    lines += ["", END]
    return "\n".join(lines)


def main():
    results_driver_main(__doc__.split("\n\n")[0],
                        "the OUT folder of scripts/pretrained_linearize.sh (teacher/ and the cells)", JSON_PATH,
                        os.path.join(ROOT, "docs", "analysis.md"), BEGIN, END, markdown, summarize,
                        "pretrained_linearize_results")


if __name__ == "__main__":
    main()
