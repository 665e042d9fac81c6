#!/usr/bin/python3
"""Linearizing a language model trained here (issue 45 part 4): the part of docs/analysis.md between
its lm-linearize markers, written from the finished cells of scripts/lm_linearize.sh, and its
numbers in docs/lm-linearize.json.

    bash scripts/lm_linearize.sh build runs/bible-clean runs/lm-linearize            # seed 0, every kind
    bash scripts/lm_linearize.sh build runs/bible-clean runs/lm-linearize KINDS 3000 600 1   # seed 1
    /usr/bin/python3 bench/lm_linearize_results.py --run runs/lm-linearize --build build
    /usr/bin/python3 bench/lm_linearize_results.py --report-only   # re-render from the JSON

Every model is scored on all blocks of the held-out test books (`attnkit eval --checkpoint best
--split test --examples 0 --items`: each block's negative log-likelihood and tokens, kept beside
the cell), and `attnkit eval --paired-bs` compares a student with the softmax control of its seed
(the teacher fine-tuned the same way) and with the teacher: sacreBLEU's paired bootstrap over the
blocks (1,000 resamples, 95%), "level" unless the interval excludes 0. Checkpoints were chosen on
validation blocks; every number reported is on the test books. The markdown is rendered from the
JSON alone (tests/python/test_docs_tables.py checks the doc against markdown(json))."""
import datetime
import json
import math
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_process import cached_test_eval, run_or_exit  # noqa: E402
from bible_heads_results import cpu_seconds_by_step, read_settings  # noqa: E402
from pretrained_heads_results import range_verdict  # noqa: E402
from gnu_time import machine, read_gnu_time, results_driver_main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- lm-linearize:begin -->", "<!-- lm-linearize:end -->"
JSON_PATH = os.path.join(ROOT, "docs", "lm-linearize.json")
CELL_NAME = re.compile(r"^(softmax|cosformer|linear-[a-z0-9]+)(?:-seed(\d+))?$")


def test_items(build, run, out):
    """The per-block statistics of run's best checkpoint on the test books; its perplexity."""
    items = cached_test_eval(build, run, out, lambda tmp: ["--items", tmp], "lm_linearize_results")
    values = items["values"]
    nll, tokens = sum(values[0::2]), sum(values[1::2])
    return items, math.exp(nll / tokens)


def paired(build, run, baseline_items, out, checkpoint="best"):
    """The paired bootstrap of run's `checkpoint` (its best by default) against baseline_items on
    the test split (made once: `out` is kept)."""
    p = cached_test_eval(build, run, out, lambda tmp: ["--paired-bs", baseline_items, "--json", tmp],
                         "lm_linearize_results", checkpoint)
    return {"difference": p["difference"]["score"], "low": p["difference"]["low"],
            "high": p["difference"]["high"], "relative": p["difference"]["score"] / p["b"]["score"],
            "p_value": p["p_value"], "verdict": p["verdict"]}


def curve(run, offset):
    """[(step, CPU seconds including `offset`, validation perplexity)] of every evaluation."""
    cpu_at = cpu_seconds_by_step(run)
    out = []
    for line in open(os.path.join(run, "metrics.jsonl")):
        d = json.loads(line)
        if "eval" in d:
            known = [s for s in cpu_at if s <= d["step"]]
            out.append([d["step"], offset + (cpu_at[max(known)] if known else 0.0), d["eval"]["perplexity"]])
    return out


COLLAPSE_VARIANTS = (("pure_attention", "pure attention"), ("attention_skip", "attention + skip"),
                     ("full_block", "full block"))
COLLAPSE_INPUTS = ["--samples", "16", "--seq-len", "64", "--no-short-paths"]


def analyze_collapse(build, out, source, data):
    """collapse.json of `attnkit analyze collapse` (float64) on 16 windows of 64 test-book tokens
    (made once); source: ["--model", DIR] or a random stack's flags."""
    path = os.path.join(out, "collapse.json")
    if not os.path.exists(path):
        run_or_exit([os.path.join(build, "attnkit"), "--threads", "1", "--seed", "0", "--quiet", "analyze", "collapse",
                     *source, "--data", data, *COLLAPSE_INPUTS, "--out", out], "lm_linearize_results")
    return json.load(open(path))


def last_layer(collapse):
    """{variant: {median, q25, q75, min, max, inputs}} of the relative composite residual after the
    last layer over every input (and every model of a random stack)."""
    out = {}
    for v in collapse["results"][0]["variants"]:
        if v["name"] not in dict(COLLAPSE_VARIANTS):
            continue
        last = v["layers"][-1]
        r = last.get("relative_composite")
        out[v["name"]] = None if r is None else {
            "median": r["median"], "q25": r["q25"], "q75": r["q75"], "min": r["min"], "max": r["max"],
            "inputs": r["count"], "vanished": last.get("vanished", 0)}
    return out


def collapse_rows(build, out_dir, teacher_run, cells):
    """Rank collapse of the teacher and every seed-0 cell's best checkpoint against 3 random draws
    of its shape and kind (`--random MODEL`, init std 0.02): after the last layer, per variant, the trained
    model's inputs against the random stacks' inputs; "below" / "above" only when every trained input
    lies below / above every random one, else "overlap"."""
    data = os.path.join(out_dir, "data", "test.txt")
    rows = []
    models = [("teacher", "softmax", teacher_run)] + [
        (c["cell"], c["stage1"]["kind"] if c["stage1"] else "softmax", os.path.join(out_dir, c["cell"], "run"))
        for c in cells if c["seed"] == 0]
    for name, kind, run in models:
        where = os.path.join(run if name == "teacher" else os.path.dirname(run), "collapse")
        trained = last_layer(analyze_collapse(build, os.path.join(where, "trained"),
                                              ["--model", os.path.join(run, "checkpoints", "best")], data))
        random = last_layer(analyze_collapse(build, os.path.join(where, "random"),
                                             ["--random", os.path.join(run, "checkpoints", "best"), "--seeds", "3"],
                                             data))
        row = {"model": name, "kind": kind, "variants": {}}
        for variant, _ in COLLAPSE_VARIANTS:
            t, r = trained.get(variant), random.get(variant)
            verdict = ("—" if t is None or r is None else
                       range_verdict([t["min"], t["max"]], [r["min"], r["max"]]))
            row["variants"][variant] = {"trained": t, "random": r, "verdict": verdict}
        rows.append(row)
    return rows


def summarize(out_dir, build):
    teacher_run = os.path.join(out_dir, "teacher")
    if not os.path.exists(os.path.join(teacher_run, "done")):
        sys.exit(f"lm_linearize_results: {teacher_run} has not finished: nothing to report (the docs are kept)")
    settings = read_settings(teacher_run)
    teacher_items_path = os.path.join(teacher_run, "test-items.json")
    teacher_items, teacher_ppl = test_items(build, teacher_run, teacher_items_path)
    cpu_at = cpu_seconds_by_step(teacher_run)
    teacher = {"layers": int(settings["model.layers"]), "hidden": int(settings["model.hidden"]),
               "heads": int(settings["model.heads"]), "steps": max(cpu_at), "cpu_s": cpu_at[max(cpu_at)],
               "curve": curve(teacher_run, 0.0), "test_perplexity": teacher_ppl,
               "test_blocks": teacher_items["items"],
               "test_tokens": int(sum(teacher_items["values"][1::2]))}
    finished = {}
    for name in sorted(os.listdir(out_dir)):
        m = CELL_NAME.match(name)
        cell = os.path.join(out_dir, name)
        if m and os.path.exists(os.path.join(cell, "run", "done")) and os.path.exists(os.path.join(cell, "test-scores.txt")):
            finished[name] = (m.group(1), int(m.group(2) or 0))
    cells = []
    for name, (kind_name, seed) in sorted(finished.items(), key=lambda x: (x[1][0] != "softmax", x[1])):
        cell, run = os.path.join(out_dir, name), os.path.join(out_dir, name, "run")
        items, ppl = test_items(build, run, os.path.join(cell, "test-items.json"))
        control_name = "softmax" if seed == 0 else f"softmax-seed{seed}"
        transfer_path = os.path.join(cell, "student", "transfer.json")
        stage1 = None
        if kind_name != "softmax":
            transfer = json.load(open(transfer_path))
            stage1 = {"kind": transfer.get("kind", kind_name), "trained": transfer["trained"],
                      "steps": transfer["steps"] if transfer["trained"] else 0,
                      "held_out_before": transfer["total"]["initial"], "held_out_after": transfer["total"]["final"],
                      "layers": len(transfer["layers"]),
                      "cpu_s": read_gnu_time(os.path.join(cell, "linearize.time"))[0]}
        offset = stage1["cpu_s"] if stage1 else 0.0
        run_cpu = cpu_seconds_by_step(run)
        entry = {"cell": name, "kind": stage1["kind"] if stage1 else "softmax", "seed": seed,
                 "stage1": stage1,
                 "stage2": {"steps": max(run_cpu), "cpu_s": run_cpu[max(run_cpu)], "curve": curve(run, offset)},
                 "test_perplexity": ppl,
                 "vs_teacher": paired(build, run, teacher_items_path, os.path.join(cell, "paired-vs-teacher.json"))}
        if items["items"] != teacher["test_blocks"]:
            sys.exit(f"lm_linearize_results: {name} scored {items['items']} test blocks, the teacher "
                     f"{teacher['test_blocks']}")
        if kind_name != "softmax" and control_name in finished:
            entry["control"] = control_name
            entry["vs_control"] = paired(build, run, os.path.join(out_dir, control_name, "test-items.json"),
                                         os.path.join(cell, "paired-vs-control.json"))
        cells.append(entry)
    if not cells:
        sys.exit(f"lm_linearize_results: no finished cell under {out_dir}: nothing to report (the docs are kept)")
    return {"generated": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "machine": machine(),
            "teacher": teacher, "cells": cells, "over_seeds": over_seeds(cells),
            "collapse": collapse_rows(build, out_dir, teacher_run, cells)}


def over_seeds(cells):
    """Per kind with more than one seed: the seeds, test perplexity per seed, the mean and sample
    sd of student − control over the seeds (each against the control of its seed), and how many
    seeds' paired intervals say worse / level / better."""
    groups = {}
    for c in cells:
        groups.setdefault(c["kind"], []).append(c)
    out = []
    for kind, runs in sorted(groups.items(), key=lambda g: (g[0] != "softmax", g[0])):
        if len(runs) < 2:
            continue
        runs.sort(key=lambda c: c["seed"])
        ppl = [c["test_perplexity"] for c in runs]
        row = {"kind": kind, "seeds": [c["seed"] for c in runs], "test_perplexity": ppl,
               "mean": statistics.mean(ppl), "sd": statistics.stdev(ppl)}
        compared = [c for c in runs if "vs_control" in c]
        if len(compared) >= 2:
            d = [c["vs_control"]["difference"] for c in compared]
            verdicts = [verdict_word(c["vs_control"]) for c in compared]
            row["vs_control"] = {"seeds": [c["seed"] for c in compared], "differences": d,
                                 "mean": statistics.mean(d), "sd": statistics.stdev(d),
                                 "verdicts": {v: verdicts.count(v) for v in ("worse", "level", "better")
                                              if v in verdicts}}
        out.append(row)
    return out


def verdict_word(p):
    """A paired result of student − baseline in perplexity (lower is better)."""
    return "level" if p["verdict"] == "level" else "worse" if p["difference"] > 0 else "better"


def paired_text(p):
    return (f"{p['difference']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}] ({100 * p['relative']:+.1f}%), "
            f"{verdict_word(p)}")


def minutes(s):
    return f"{s / 60:.1f}"


def markdown(s):
    t = s["teacher"]
    lines = [BEGIN, "",
             f"Teacher: a GPT-2-shaped softmax LM ({t['layers']} layers, hidden {t['hidden']}, {t['heads']} heads, "
             f"blocks of 128 tokens) trained {t['steps']:,} steps of 16 blocks on the English training books of "
             "the leak-free Bible split with its Unigram tokenizer (`scripts/lm_linearize.sh`, "
             f"{minutes(t['cpu_s'])} CPU min of training steps); its best checkpoint by validation perplexity "
             f"(every 20th block of the training books, held out): test perplexity {t['test_perplexity']:.2f} "
             f"on all {t['test_blocks']:,} blocks ({t['test_tokens']:,} tokens) of the held-out test books. "
             "Each cell: `attnkit linearize` of every layer (stage 1, attention transfer of the feature maps "
             "alone; held-out loss on the validation books, summed over the layers), then `attnkit train --init` "
             "(stage 2, every weight, lr 3e-4 cosine, 16 blocks per step; the best checkpoint by validation "
             "perplexity); the softmax control is the teacher fine-tuned the same way. Machine: "
             f"{s['machine']}; a stand-in for a pretrained LM at this machine's budget. Differences are "
             "student − baseline in test perplexity with the paired bootstrap over the test blocks "
             "(`attnkit eval --paired-bs`, 1,000 resamples, 95%); \"level\" where the interval covers 0. "
             f"Generated {s['generated']} by `bench/lm_linearize_results.py`.", "",
             "| kind | seed | stage 1 held-out loss | stage 1 CPU min | stage 2 steps (CPU min) "
             "| validation perplexity at each evaluation (CPU min since stage 1 began) | test perplexity | − softmax control [95%] "
             "| − teacher [95%] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in s["cells"]:
        st1 = c["stage1"]
        loss = ("—" if st1 is None else f"{st1['held_out_before']:.4g} → {st1['held_out_after']:.4g}"
                if st1["trained"] else f"{st1['held_out_before']:.4g} (no map to train)")
        stage1_cpu = "—" if st1 is None else minutes(st1["cpu_s"])
        points = " / ".join(f"{ppl:.1f} ({minutes(cpu)})" for _, cpu, ppl in c["stage2"]["curve"])
        control = paired_text(c["vs_control"]) if "vs_control" in c else "—"
        lines.append(f"| `{c['kind']}` | {c['seed']} | {loss} | {stage1_cpu} | {c['stage2']['steps']} "
                     f"({minutes(c['stage2']['cpu_s'])}) | {points} | {c['test_perplexity']:.2f} | {control} | "
                     f"{paired_text(c['vs_teacher'])} |")
    if s.get("over_seeds"):
        lines += ["", "Over training seeds (the kinds above with more than one seed): test perplexity per seed, "
                  "its mean ± sample sd, and student − control (each seed against the control of its seed) "
                  "as mean ± sd with each seed's verdict.", "",
                  "| kind | seeds | test perplexity per seed | mean ± sd | − control, mean ± sd | seeds' verdicts |",
                  "|---|---|---|---|---|---|"]
        for g in s["over_seeds"]:
            v = g.get("vs_control")
            lines.append(f"| `{g['kind']}` | {', '.join(str(x) for x in g['seeds'])} | "
                         f"{' / '.join(f'{p:.2f}' for p in g['test_perplexity'])} | {g['mean']:.2f} ± {g['sd']:.2f} | "
                         + (f"{v['mean']:+.2f} ± {v['sd']:.2f} | "
                            + ", ".join(f"{n} {w}" for w, n in v["verdicts"].items()) if v else "— | —") + " |")
    if s.get("collapse"):
        lines += ["", "Rank collapse of these trained models (issue 44: checkpoints past the unigram stage) against "
                  "3 random draws of each model's shape and kind at init std 0.02 (`attnkit analyze collapse --random "
                  "MODEL`), in float64 on 16 windows of 64 tokens of the test books; the relative composite residual "
                  "after the last layer, median [min, max] over the inputs (16 trained, 48 random). \"below\" / "
                  "\"above\": every trained input lies below / above every random one; \"overlap\" otherwise.", "",
                  "| model | kind | " + " | ".join(f"{label}: trained | random | verdict" for _, label in COLLAPSE_VARIANTS)
                  + " |",
                  "|---|---|" + "---|---|---|" * len(COLLAPSE_VARIANTS)]
        spread = lambda x: "—" if x is None else f"{x['median']:.3g} [{x['min']:.3g}, {x['max']:.3g}]"  # noqa: E731
        for row in s["collapse"]:
            cells = []
            for variant, _ in COLLAPSE_VARIANTS:
                v = row["variants"][variant]
                cells += [spread(v["trained"]), spread(v["random"]), v["verdict"]]
            lines.append(f"| {row['model']} | `{row['kind']}` | " + " | ".join(cells) + " |")
    lines += ["", END, ""]
    return "\n".join(lines)


def main():
    results_driver_main(__doc__.split("\n\n")[0], "the OUT folder of scripts/lm_linearize.sh (teacher/ and the cells)",
                        JSON_PATH, os.path.join(ROOT, "docs", "analysis.md"), BEGIN, END, markdown, summarize,
                        "lm_linearize_results")


if __name__ == "__main__":
    main()
