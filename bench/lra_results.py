#!/usr/bin/python3
"""The Long-Range Arena table (issue 29): every attention kind on the five LRA tasks at an equal CPU
budget per cell, plus Pathfinder-X (16K tokens) step time and memory of every kind.

    /usr/bin/python3 bench/lra_results.py [--build build] [--budget 300] [--tasks ...] [--kinds ...]
                                          [--cells N] [--report-only] [--no-pathfinder-x]

Each cell (task x kind) is `attnkit --threads 1 train ... --run.cpu_budget BUDGET` under
`/usr/bin/time -v`, niced, in runs/lra-bBUDGET/TASK--KIND (":" of a kind written "-"). The budget
counts the CPU time of the training steps only (evaluations and checkpoints do not count; see
run.cpu_budget in docs/training.md), so cells are comparable whatever else runs on the machine.
A finished cell has result.json and is never run again; an interrupted one resumes from its newest
checkpoint (every 20 steps). After training: the test split (at most 2,000 examples) of the final
checkpoint. Then docs/lra-results.json (numbers + training-loss curves, read by the demo's report
section) and the LRA part of docs/results.md (between its lra-results markers) are rewritten.

Data (made once under data/lra/): ListOps at LRA's lengths (500-2000 tokens, 20,000 training
expressions), Pathfinder 32x32 (hard, 20,000 / 2,000 / 2,000), Fashion-MNIST padded to 32x32,
fortune passages for Text and Retrieval (docs/lra.md names each stand-in).
"""
import argparse
import datetime
import gzip
import json
import os
import re
import resource
import struct
import subprocess
import sys

from gnu_time import machine, replace_region, write_json, read_gnu_time as time_file, read_run_times

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ["softmax", "linear:elu", "linear:relu", "linear:favor", "cosformer", "synthesizer-dense"]
# Task: settings of its cells. The model is LRA's small configuration for all of them.
TASKS = {
    "listops": {"label": "ListOps", "data": "data/lra/listops", "tokens": "500-2000",
                "same_data": "LRA's task, our generator", "flags": ["--task.truncate", "2000", "--task.batch_size", "8"]},
    "text": {"label": "Text", "data": "data/lra/text", "tokens": "1K-4K byte",
             "same_data": "stand-in for IMDB: fortunes",
             "task": "lra-text", "flags": ["--task.truncate", "4096", "--task.batch_size", "8"]},
    "retrieval": {"label": "Retrieval", "data": "data/lra/retrieval", "tokens": "2 x 2K-4K byte",
                  "same_data": "stand-in for the ACL Anthology: fortune pairs",
                  "task": "lra-retrieval", "flags": ["--task.truncate", "4096", "--task.batch_size", "4"]},
    "image": {"label": "Image", "data": "/usr/share/datasets/fashion-mnist", "tokens": "1024",
              "same_data": "stand-in for CIFAR-10: Fashion-MNIST",
              "task": "lra-image", "flags": ["--task.image_size", "32", "--task.batch_size", "16"]},
    "pathfinder": {"label": "Pathfinder", "data": "data/lra/pathfinder32", "tokens": "1024",
                   "same_data": "LRA's task, our generator",
                   "task": "lra-pathfinder", "flags": ["--task.batch_size", "16"]},
}
ORDER = ["image", "pathfinder", "listops", "text", "retrieval"]  # shortest sequences first
COMMON = ["--model.layers", "2", "--model.hidden", "64", "--model.heads", "2", "--model.intermediate", "128",
          "--model.pooling", "mean", "--model.dropout", "0.1", "--optimizer.name", "adamw",
          "--optimizer.lr", "1e-3", "--optimizer.weight_decay", "0.01", "--schedule.kind", "cosine",
          "--schedule.warmup", "20", "--run.clip_norm", "1.0", "--run.steps", "1000000",
          "--run.eval_every", "0", "--run.checkpoint_every", "20", "--run.keep_last", "1",
          "--run.log_every", "5", "--task.eval_examples", "500"]
TEST_EXAMPLES = 2000
# Test accuracy (%) on LRA's own data: the leaderboard rows of the issue and REFERENCES.md.
PUBLISHED = [
    ("Transformer (LRA)", {"listops": 36.37, "text": 64.27, "retrieval": 57.46, "image": 42.44, "pathfinder": 71.40}),
    ("Linear Transformer (LRA)", {"listops": 16.13, "text": 65.90, "retrieval": 53.09, "image": 42.34,
                                  "pathfinder": 75.30}),
    ("Performer (LRA)", {"listops": 18.01, "text": 65.40, "retrieval": 53.82, "image": 42.77, "pathfinder": 77.05}),
]
CHANCE = {"listops": 10.0, "text": 25.0, "retrieval": 50.0, "image": 10.0, "pathfinder": 50.0}
PATHFINDER_X = {"n": 16384, "batch": 1, "memory_limit_gib": 12}
BEGIN, END = "<!-- lra-results:begin -->", "<!-- lra-results:end -->"


def log(message):
    print(f"lra_results: {message}", file=sys.stderr, flush=True)


def slug(kind):
    return kind.replace(":", "-")


def cell_dir(args, task, kind):
    return os.path.join(args.runs, f"{task}--{slug(kind)}")


def make_data(attnkit):
    steps = [
        ("data/lra/listops/basic_train.tsv",
         ["data", "listops", "--out", "data/lra/listops", "--min-length", "500", "--max-length", "2000",
          "--train", "20000", "--val", "2000", "--test", "2000"]),
        ("data/lra/pathfinder32/pathfinder32_train.bin",
         ["data", "lra-pathfinder", "--out", "data/lra/pathfinder32", "--size", "32", "--train", "20000",
          "--val", "2000", "--test", "2000", "--seed", "0"]),
        ("data/lra/text/text_train.tsv", ["data", "lra-text", "--out", "data/lra/text"]),
        ("data/lra/retrieval/retrieval_train.tsv", ["data", "lra-retrieval", "--out", "data/lra/retrieval"]),
    ]
    for marker, command in steps:
        if not os.path.isfile(marker):
            log("making " + os.path.dirname(marker))
            subprocess.run([attnkit, *command], check=True, stdout=subprocess.DEVNULL)


def test_labels(task):
    """The labels of the task's test split, in file order (what a cell's test accuracy is over)."""
    data = TASKS[task]["data"]
    if task == "image":
        with gzip.open(os.path.join(data, "t10k-labels-idx1-ubyte.gz")) as f:
            return list(f.read()[8:])  # IDX: magic, count, then one byte per label
    if task == "pathfinder":
        with open(os.path.join(data, "pathfinder32_test.bin"), "rb") as f:
            raw = f.read()
        width, height, count = struct.unpack("<3I", raw[8:20])
        return [raw[20 + i * (1 + width * height)] for i in range(count)]
    name = {"listops": "basic_test.tsv", "text": "text_test.tsv", "retrieval": "retrieval_test.tsv"}[task]
    with open(os.path.join(data, name)) as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    return [r[-1] for r in rows[1:]] if task == "listops" else [r[0] for r in rows]  # listops: a header, label last


def majority_shares():
    """Each task's most frequent test label's share (%) of the examples a cell is scored on."""
    shares = {}
    for task in ORDER:
        labels = test_labels(task)[:TEST_EXAMPLES]
        shares[task] = 100 * max(labels.count(v) for v in set(labels)) / len(labels)
    return shares


def metrics(run):
    records = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            records.append(json.loads(line))
    return records


def pilot_curve(run):
    """[(step, CPU seconds of training steps up to it, validation accuracy)] of a cell's evaluations."""
    cpu_at, out = {}, []
    for r in metrics(run):
        if "cpu_seconds" in r:  # a budgeted run's count goes on across resumes (its checkpoints keep it)
            cpu_at[r["step"]] = r["cpu_seconds"]
        if "eval" in r and "accuracy" in r["eval"]:
            known = [s for s in cpu_at if s <= r["step"]]
            out.append([r["step"], cpu_at[max(known)] if known else 0.0, r["eval"]["accuracy"]])
    return out


def pilot_record_path(args, task, kind):
    return os.path.join(args.store, os.path.basename(args.runs), f"{task}-{kind.replace(':', '-')}.json")


def pilot_cell(args, task, kind):
    """A pilot cell's entry: its validation curve, the task's chance level, its result when finished
    (from its run directory; else from its record in --store, or None)."""
    run = cell_dir(args, task, kind)
    if not os.path.isfile(os.path.join(run, "metrics.jsonl")):
        path = pilot_record_path(args, task, kind)
        return json.load(open(path)) if os.path.isfile(path) else None
    result = os.path.join(run, "result.json")
    return {"task": task, "kind": kind, "chance": CHANCE[task], "curve": pilot_curve(run),
            "result": json.load(open(result)) if os.path.isfile(result) else None}


def record_pilot_cell(args, task, kind):
    """A finished pilot cell's entry, kept in --store (in git: runs/ lives on one machine)."""
    path = pilot_record_path(args, task, kind)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, dict(pilot_cell(args, task, kind), machine=machine(),
                          date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")))


def write_pilot(args):
    """runs/lra-pilot-bBUDGET/pilot.json: each finished or running cell's validation curve, the
    task's chance level and its test accuracy when finished; printed too. Every cell under the
    pilot's directory or recorded in --store is kept, not only those of this invocation's --tasks /
    --kinds (a pilot of one kind after another must not drop the earlier kinds' curves)."""
    cells = {}
    kinds = args.kinds + [k for k in KINDS if k not in args.kinds]
    for task in ORDER:
        for kind in kinds:
            cell = pilot_cell(args, task, kind)
            if cell is None:
                continue
            cells[f"{task}/{kind}"] = cell
            if task not in args.tasks or kind not in args.kinds:
                continue
            for step, cpu, accuracy in cells[f"{task}/{kind}"]["curve"]:
                print(f"{task} {kind} step {step} cpu_s {cpu:.0f} validation accuracy {100 * accuracy:.1f}% "
                      f"(chance {CHANCE[task]:g}%)")
    os.makedirs(args.runs, exist_ok=True)
    write_json(os.path.join(args.runs, "pilot.json"),
               {"budget_cpu_s": args.budget, "eval_every": args.eval_every, "machine": machine(),
                "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "cells": cells})


def common(args):
    """COMMON, with a pilot's validation evaluations every --eval-every steps."""
    flags = list(COMMON)
    if getattr(args, "pilot", False):
        flags[flags.index("--run.eval_every") + 1] = str(args.eval_every)
    return flags


def run_cell(args, attnkit, task, kind):
    spec = TASKS[task]
    run = cell_dir(args, task, kind)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    resuming = os.path.isdir(os.path.join(run, "checkpoints"))
    part = len([f for f in os.listdir(run) if f.startswith("time-")]) if os.path.isdir(run) else 0
    os.makedirs(run, exist_ok=True)
    timing = os.path.join(run, f"time-{part}.txt")
    base = ["nice", "-n", str(args.nice), "/usr/bin/time", "-v", "-o", timing, attnkit, "--threads", "1", "--quiet"]
    if resuming:
        command = [*base, "train", "--resume", run, "--run.cpu_budget", str(args.budget)]
    else:
        command = [*base, "train", "--task.name", spec.get("task", task), "--task.data", spec["data"],
                   "--model.attention", kind, "--run.dir", run, "--run.cpu_budget", str(args.budget),
                   *common(args), *spec["flags"]]
    log(f"{task} / {kind}: {'resuming' if resuming else 'training'} ({args.budget} CPU s)")
    with open(os.path.join(run, f"train-{part}.log"), "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        tail = open(os.path.join(run, f"train-{part}.log")).read().strip().splitlines()[-1:]
        result = {"task": task, "kind": kind, "failed": tail[0] if tail else f"exit {done.returncode}"}
        peak = time_file(timing)[2] if os.path.isfile(timing) else None
        result["peak_rss_mib"] = peak
        write_json(os.path.join(run, "result.json"), result)
        log(f"{task} / {kind}: failed: {result['failed']}")
        return
    test = subprocess.run(["nice", "-n", str(args.nice), attnkit, "--threads", "1", "eval", "--run", run, "--split",
                           "test", "--examples", str(TEST_EXAMPLES)],
                          capture_output=True, text=True, env=env)
    if test.returncode != 0:
        sys.exit(f"lra_results: eval of {run} failed: {test.stderr.strip()}")
    m = re.search(r"^step (\d+) split test .*accuracy=([0-9.]+)", test.stdout, re.M)
    records = metrics(run)
    steps = [r for r in records if "loss" in r and "cpu_seconds" in r]
    evals = [r for r in records if "eval" in r]
    cpu_total, wall_total, peak = read_run_times(run)
    last = steps[-1]
    result = {
        "task": task, "kind": kind, "steps": int(m.group(1)), "train_cpu_s": last["cpu_seconds"],
        "step_cpu_ms": 1000 * last["cpu_seconds"] / last["step"],
        "tokens_per_cpu_s": sum(r["tokens"] for r in steps) / max(last["cpu_seconds"], 1e-9),
        "process_cpu_s": cpu_total, "wall_s": wall_total, "peak_rss_mib": peak,
        "val_accuracy": evals[-1]["eval"]["accuracy"] if evals else None,
        "test_accuracy": float(m.group(2)),
        "curve": [[r["cpu_seconds"], r["loss"]] for r in steps],
    }
    write_json(os.path.join(run, "result.json"), result)
    log(f"{task} / {kind}: {result['steps']} steps, test accuracy {100 * result['test_accuracy']:.1f}%")


def pathfinder_x(args, kinds):
    """One training step (forward, backward, AdamW) of the LRA model at 16,384 tokens, per kind, each
    in its own process under an address-space limit (so 'did not fit' is an allocation failure, not
    the OOM killer)."""
    bench = os.path.join(args.build, "attnkit_bench_train")
    limit = PATHFINDER_X["memory_limit_gib"] << 30
    rows = []
    for kind in kinds:
        command = [bench, "--model", "classifier", "--kind", kind, "--n", str(PATHFINDER_X["n"]), "--batch",
                   str(PATHFINDER_X["batch"]), "--hidden", "64", "--layers", "2", "--heads", "2",
                   "--intermediate", "128", "--vocab", "257", "--steps", "2", "--warmup", "1", "--threads", "1"]
        log(f"Pathfinder-X step: {kind}")
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                              env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"),
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
        if done.returncode == 0:
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({"kind": kind, "fits": True, "step_ms": row["step_ms"], "step_cpu_ms": row["step_cpu_ms"],
                         "extra_peak_mib": row["extra_peak_mib"]})
        else:
            message = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            rows.append({"kind": kind, "fits": False, "error": message[:300]})
    return rows


def load_results(args):
    cells = {}
    for task in ORDER:
        for kind in args.kinds:
            path = os.path.join(cell_dir(args, task, kind), "result.json")
            if os.path.isfile(path):
                cell = json.load(open(path))
                curve = cell.get("curve", [])
                if len(curve) > 100:  # the docs' copy: about 100 points per curve, the last kept
                    stride = -(-len(curve) // 100)
                    cell["curve"] = curve[::-1][::stride][::-1]
                cells[f"{task}|{kind}"] = cell
    return cells


def fmt_acc(cell):
    if cell is None:
        return "not run yet"
    if "failed" in cell:
        return "failed"
    return f"{100 * cell['test_accuracy']:.1f}"


def did_not_fit(error):
    """LibTorch's allocator message, shortened to what it says."""
    found = re.search(r"tried to allocate (\d+) bytes", error)
    if not found:
        return error
    return (f"an allocation of {int(found.group(1)) / (1 << 30):.1f} GiB was refused "
            f"(address space limited to {PATHFINDER_X['memory_limit_gib']} GiB)")


def markdown(summary):
    tasks, kinds, cells = summary["tasks"], summary["kinds"], summary["cells"]
    out = [BEGIN, "", "## Long-Range Arena: every attention kind on the five tasks", "",
           f"Generated by `bench/lra_results.py --budget {summary['budget_cpu_s']:g}` "
           f"(last run {summary['date']}); do not edit by hand, run it again. Numbers also in "
           "`docs/lra-results.json` (the report's LRA section reads it).", "",
           "**What was run.** Each cell trains LRA's small model (family bert, 2 layers, hidden 64, 2 heads, "
           "feed-forward 128, mean pooling, dropout 0.1; AdamW lr 1e-3, weight decay 0.01, 20 warm-up steps, "
           "cosine decay over the budget, clip 1.0) on one thread for "
           f"**{summary['budget_cpu_s'] / 60:g} CPU minutes of training steps** (`run.cpu_budget`; the "
           "evaluations do not count), then scores the final checkpoint on the test split (at most "
           f"{TEST_EXAMPLES:,} examples). Data and lengths: " +
           "; ".join(f"{TASKS[t]['label']} {TASKS[t]['tokens']} tokens ({TASKS[t]['same_data']})" for t in tasks) +
           " — see [lra.md](lra.md). Machine: " + summary["machine"] + ".", "",
           "Test accuracy (%):", "",
           "| attention | " + " | ".join(TASKS[t]["label"] for t in tasks) + " | average |",
           "|---|" + "---|" * (len(tasks) + 1)]
    for name, row in PUBLISHED:
        values = [row[t] for t in tasks]
        out.append(f"| {name} — *different data and budget* | " + " | ".join(f"{v:.2f}" for v in values) +
                   f" | {sum(values) / len(values):.2f} |")
    # Only its ListOps figure is in our sources (the seed's text omits the table).
    out.append("| cosFormer (its paper's Table 4) — *different data and budget* | " +
               " | ".join("37.9" if t == "listops" else "not in our sources" for t in tasks) + " | — |")
    for kind in kinds:
        row = [cells.get(f"{t}|{kind}") for t in tasks]
        done = [c for c in row if c and "failed" not in c]
        average = f"{100 * sum(c['test_accuracy'] for c in done) / len(done):.1f}" if len(done) == len(tasks) else "—"
        out.append(f"| attnkit {kind} | " + " | ".join(fmt_acc(c) for c in row) + f" | {average} |")
    out.append("| chance | " + " | ".join(f"{CHANCE[t]:.0f}" for t in tasks) + " | — |")
    if summary.get("majority"):
        out.append("| the most frequent test label (always answering it) | " +
                   " | ".join(f"{summary['majority'][t]:.2f}" for t in tasks) + " | — |")
    out += ["", "Cost per cell: training steps reached in the budget, CPU milliseconds per step, peak "
            "resident memory of the training process (evaluation included):", "",
            "| attention | " + " | ".join(TASKS[t]["label"] for t in tasks) + " |",
            "|---|" + "---|" * len(tasks)]
    for kind in kinds:
        parts = []
        for t in tasks:
            c = cells.get(f"{t}|{kind}")
            if c is None:
                parts.append("—")
            elif "failed" in c:
                parts.append(f"failed: {c['failed']}")
            else:
                parts.append(f"{c['steps']} steps, {c['step_cpu_ms']:,.0f} ms, {c['peak_rss_mib']:,.0f} MiB")
        out.append(f"| {kind} | " + " | ".join(parts) + " |")
    px = summary.get("pathfinder_x")
    if px:
        out += ["", f"**Pathfinder-X** ({PATHFINDER_X['n']:,} tokens, batch {PATHFINDER_X['batch']}, the same "
                "model): the mean of two training steps (forward, backward, AdamW) after one warm-up step, one thread, "
                f"each kind in its own process limited to {PATHFINDER_X['memory_limit_gib']} GiB of address "
                "space (`attnkit_bench_train --model classifier`):", "",
                "| attention | step (wall) | step (CPU) | memory above the model | vs softmax (CPU) |",
                "|---|---|---|---|---|"]
        soft = next((r for r in px if r["kind"] == "softmax" and r["fits"]), None)
        for r in px:
            if r["fits"]:
                ratio = (f"{soft['step_cpu_ms'] / r['step_cpu_ms']:.1f}x faster" if soft and r is not soft
                         else "—")
                out.append(f"| {r['kind']} | {r['step_ms'] / 1000:.2f} s | {r['step_cpu_ms'] / 1000:.2f} s | "
                           f"{r['extra_peak_mib']:,.0f} MiB | {ratio} |")
            else:
                out.append(f"| {r['kind']} | did not fit: {r['error']} | | | |")
    out += ["", "Reproduce: `make build && /usr/bin/python3 bench/lra_results.py --budget "
            f"{summary['budget_cpu_s']:g}` (cells run one after another, niced; a rerun skips finished "
            "cells and resumes interrupted ones).", "", END]
    return "\n".join(out) + "\n"


def write_docs(args, summary):
    write_json(os.path.join(ROOT, "docs", "lra-results.json"), summary)
    replace_region(os.path.join(ROOT, "docs", "results.md"), BEGIN, END, markdown(summary))
    log(f"wrote docs/lra-results.json and the LRA part of docs/results.md ({len(summary['cells'])} cells)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--budget", type=float, default=300, help="CPU seconds of training steps per cell")
    p.add_argument("--tasks", nargs="+", default=ORDER, choices=ORDER)
    p.add_argument("--kinds", nargs="+", default=KINDS)
    p.add_argument("--cells", type=int, default=0, help="run at most N cells, then write the docs (0 = all)")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--no-pathfinder-x", action="store_true")
    p.add_argument("--pilot", action="store_true",
                   help="a learning-curve pilot (issue 44: the budget a verdict needs): the cells evaluate on "
                        "validation every --eval-every steps, run under runs/lra-pilot-bBUDGET, and their curves "
                        "(validation accuracy against CPU seconds) go to its pilot.json and stdout; no docs")
    p.add_argument("--eval-every", type=int, default=200, help="with --pilot: steps between validation evaluations")
    p.add_argument("--nice", type=int, default=10, help="niceness of the cells' processes")
    p.add_argument("--store", default=os.path.join(ROOT, "docs", "cells"),
                   help="with --pilot: finished cells' records, STORE/lra-pilot-bBUDGET/TASK-KIND.json (kept in git)")
    args = p.parse_args()
    os.chdir(ROOT)
    args.runs = os.path.join("runs", f"lra-{'pilot-' if args.pilot else ''}b{args.budget:g}")
    attnkit = os.path.join(args.build, "attnkit")
    if args.pilot:
        if args.report_only:
            p.error("--pilot runs cells; --report-only renders the docs of a full run")
        make_data(attnkit)
        for task in args.tasks:
            for kind in args.kinds:
                if os.path.isfile(pilot_record_path(args, task, kind)):
                    continue
                if not os.path.isfile(os.path.join(cell_dir(args, task, kind), "result.json")):
                    run_cell(args, attnkit, task, kind)
                record_pilot_cell(args, task, kind)
        write_pilot(args)
        return
    summary_path = os.path.join(args.runs, "summary.json")
    previous = json.load(open(summary_path)) if os.path.isfile(summary_path) else {}
    px = previous.get("pathfinder_x")
    if not args.report_only and not args.no_pathfinder_x and not px:
        px = pathfinder_x(args, args.kinds)  # first: minutes, where the cells take hours
        os.makedirs(args.runs, exist_ok=True)
        write_json(summary_path, dict(previous, pathfinder_x=px))
    if not args.report_only:
        make_data(attnkit)
        ran = 0
        for task in args.tasks:
            for kind in args.kinds:
                if os.path.isfile(os.path.join(cell_dir(args, task, kind), "result.json")):
                    continue
                if args.cells and ran >= args.cells:
                    break
                run_cell(args, attnkit, task, kind)
                ran += 1
    cells = load_results(args)
    if not cells:  # e.g. --report-only on a machine without the runs: keep the docs' numbers
        sys.exit(f"lra_results: no finished cells under {args.runs}; docs/lra-results.json and the docs are kept")
    summary = {"budget_cpu_s": args.budget, "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
               "machine": machine(), "tasks": ORDER, "kinds": args.kinds,
               "task_labels": {t: TASKS[t]["label"] for t in ORDER},
               "published": [{"name": n, "accuracy": row} for n, row in PUBLISHED], "chance": CHANCE,
               "majority": majority_shares(),
               "cells": cells,
               "pathfinder_x": [r if r["fits"] else dict(r, error=did_not_fit(r["error"])) for r in px or []]}
    os.makedirs(args.runs, exist_ok=True)
    write_json(summary_path, summary)
    write_docs(args, summary)


if __name__ == "__main__":
    main()
