#!/usr/bin/python3
"""Training benchmarks (part of `make bench`): attnkit_bench_train vs bench/peers/train_peer.py,
one fresh process per case, same threads, same shapes, printed as tables and written to
docs/training-benchmarks.md.

  1. Throughput: a GPT-2-shaped causal LM (hidden 256, 4 layers, 4 heads, vocab 8192, batch 8,
     n 256), tokens/s of attnkit vs the same model and loop in python3-torch eager, per kind.
  2. LRA-style scaling: the same model at batch 1, n = 1K, 2K, 3K, 4K, softmax / linear /
     cosFormer: tokens/s (and steps/s) and extra peak memory, attnkit and peer, plus each
     implementation's tokens/s at 4K as a share of its tokens/s at 1K.

    /usr/bin/python3 bench/train_compare.py --build BUILD [--quick] [--no-write]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

from mlm_compare import BEGIN as MLM_BEGIN, END as MLM_END
from thread_wait import LIBRARY_DEFAULTS, THREAD_WAIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# glibc settings equal to what attnkit::reuse_freed_memory() does inside attnkit's executables;
# given to the peer for the like-for-like column.
REUSE_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
# attnkit's process set-up for the peer = that malloc + attnkit's thread-wait settings; the
# default set-up for attnkit = --default-malloc + the libraries' own spin-waits.
PEER_AS_ATTNKIT = {"GLIBC_TUNABLES": REUSE_MALLOC, **THREAD_WAIT}


def run(cmd, timeout, extra_env=None):
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2", **(extra_env or {}))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def case(build, kind, n, batch, steps, warmup, timeout):
    args = ["--kind", kind, "--n", str(n), "--batch", str(batch), "--steps", str(steps),
            "--warmup", str(warmup), "--threads", "2"]
    ours = run([os.path.join(build, "attnkit_bench_train"), *args], timeout)
    peer = run(["/usr/bin/python3", os.path.join(ROOT, "bench", "peers", "train_peer.py"), *args], timeout)
    return ours, peer


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def value(r, key):
    return None if "error" in r else r[key]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--quick", action="store_true", help="fewer steps, n up to 2K; no file written")
    ap.add_argument("--no-write", action="store_true")
    a, _ = ap.parse_known_args()  # bench/run.sh passes compare.py's options along too
    started = time.time()
    steps = 2 if a.quick else 5
    lines = []
    out = lambda s="": (print(s), lines.append(s))  # noqa: E731

    out("### Throughput: GPT-2-shaped LM (hidden 256, 4 layers, 4 heads, vocab 8192), batch 8, n 256")
    out()
    out("| kind | attnkit tokens/s | peer tokens/s | speed-up | attnkit, default set-up | peer, attnkit's set-up "
        "| speed-up, both default | speed-up, both attnkit's set-up | attnkit extra peak MiB | peer extra peak MiB |")
    out("|---|---|---|---|---|---|---|---|---|---|")
    targets = []
    for kind in ("softmax", "linear", "cosformer"):
        args = ["--kind", kind, "--n", "256", "--batch", "8", "--steps", str(steps), "--warmup", "1", "--threads", "2"]
        ours, peer = case(a.build, kind, 256, 8, steps, 1, 600)
        ours_default = run([os.path.join(a.build, "attnkit_bench_train"), *args, "--default-malloc"], 600,
                           LIBRARY_DEFAULTS)
        peer_tuned = run(["/usr/bin/python3", os.path.join(ROOT, "bench", "peers", "train_peer.py"), *args], 600,
                         PEER_AS_ATTNKIT)
        t = [value(r, "tokens_per_s") for r in (ours, peer, ours_default, peer_tuned)]
        ratio = lambda x, y: f"{x / y:.2f}×" if x and y else "—"  # noqa: E731
        out(f"| {kind} | {fmt(t[0])} | {fmt(t[1])} | {ratio(t[0], t[1])} | {fmt(t[2])} | {fmt(t[3])} | "
            f"{ratio(t[2], t[1])} | {ratio(t[0], t[3])} | {fmt(value(ours, 'extra_peak_mib'))} | "
            f"{fmt(value(peer, 'extra_peak_mib'))} |")
        if t[0] and t[1]:
            like = f"; like-for-like (both with attnkit's set-up) {t[0] / t[3]:.2f}×" if t[3] else ""
            targets.append(f"- {kind}: attnkit / peer = {t[0] / t[1]:.2f}× (target ≥ 1.3×) — "
                           + ("met" if t[0] / t[1] >= 1.3 else "NOT met") + like)
        if kind == "softmax":  # issue 18: ≥ 1.5× with the same process set-up on both sides
            for label, ours_t, peer_t in (("both libraries' defaults", t[2], t[1]),
                                          ("both attnkit's set-up", t[0], t[3])):
                if ours_t and peer_t:
                    targets.append(f"- softmax like-for-like, {label}: {ours_t / peer_t:.2f}× "
                                   "(target ≥ 1.5×) — " + ("met" if ours_t / peer_t >= 1.5
                                                          else "NOT met"))
    out()
    out("Speed-up = attnkit as `attnkit train` runs it (it calls `attnkit::reuse_freed_memory()` at start-up "
        "and starts with short thread-pool spin-waits, `src/process_start.cpp`) over the peer as a PyTorch "
        "user runs it. The two like-for-like columns give both sides the same process set-up: the "
        "libraries' defaults (attnkit with `--default-malloc` and "
        + " ".join(f"`{k}={v}`" for k, v in LIBRARY_DEFAULTS.items()) + "), or attnkit's, passed to the "
        f"peer as `GLIBC_TUNABLES={REUSE_MALLOC}` "
        + " ".join(f"`{k}={v}`" for k, v in THREAD_WAIT.items()) + ".")
    out()
    lengths = (1024, 2048) if a.quick else (1024, 2048, 3072, 4096)
    out("### LRA-style scaling: the same model, batch 1, tokens/s (steps/s) and extra peak memory")
    out()
    out("| kind | impl | " + " | ".join(f"n={n}" for n in lengths) + f" | tokens/s at {lengths[-1]} vs {lengths[0]} |")
    out("|---|---|" + "---|" * len(lengths) + "---|")
    for kind in ("softmax", "linear", "cosformer"):
        results = {"attnkit": [], "peer": []}
        for n in lengths:
            ours, peer = case(a.build, kind, n, 1, 2 if a.quick else 3, 1, 900)
            results["attnkit"].append(ours)
            results["peer"].append(peer)
        for impl, rs in results.items():
            cells = []
            for n, r in zip(lengths, rs):
                if "error" in r:
                    cells.append(r["error"])
                else:
                    cells.append(f"{r['tokens_per_s']:,.0f} ({1000 / r['step_ms']:.2f}/s), {r['extra_peak_mib']:,.0f} MiB")
            first, last = value(rs[0], "tokens_per_s"), value(rs[-1], "tokens_per_s")
            share = f"{100 * last / first:.0f}%" if first and last else "—"
            out(f"| {kind} | {impl} | " + " | ".join(cells) + f" | {share} |")
            if impl == "attnkit" and kind != "softmax" and first and last:
                targets.append(f"- {kind}: tokens/s at n={lengths[-1]} is {100 * last / first:.0f}% of n={lengths[0]} "
                               "(target ≥ 90%) — " + ("met" if last / first >= 0.9 else "NOT met"))
    out()
    out("### Targets")
    out()
    for line in targets:
        out(line)
    out()
    minutes = (time.time() - started) / 60
    print(f"train_compare: {minutes:.1f} min")
    if a.quick or a.no_write:
        return
    load = os.getloadavg()[0]
    header = [
        "# attnkit training benchmarks", "",
        f"Generated by `make bench` (`bench/train_compare.py`) on "
        f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC in {minutes:.1f} min; do not edit by hand, run it again.",
        "",
        "## How it was measured", "",
        f"- Machine: {os.cpu_count()} CPU(s); load average (1 min) when the run ended: {load:.2f} "
        "(other work on the machine distorts the timings).",
        "- attnkit: `attnkit_bench_train` (TaskModel, GPT-2 preset, fused kernels). Peer: "
        "`bench/peers/train_peer.py`, the same model and AdamW step in python3-torch eager "
        "(attention as in `bench/peers/attention_peer.py`). 2 threads each, one fresh process per case.",
        "- tokens/s = batch·n·steps / time of the timed steps after one untimed warm-up step; "
        "extra peak = ru_maxrss at the end − resident set before the first step.",
        "- Process set-up: attnkit as `attnkit train` runs (`reuse_freed_memory()`, BLAS capped at the "
        "thread count, short thread-pool spin-waits); the peer as a PyTorch user runs it, except in the like-for-like columns. "
        "`OMP_NUM_THREADS` = `OPENBLAS_NUM_THREADS` = 2 on both sides.", "",
        "## Results", "",
    ]
    path = os.path.join(ROOT, "docs", "training-benchmarks.md")
    # bench/mlm_compare.py's section (between its markers) is its own: kept as it is.
    kept = []
    if os.path.exists(path):
        text = open(path).read()
        if MLM_BEGIN in text and MLM_END in text:
            kept = ["", MLM_BEGIN + text.split(MLM_BEGIN, 1)[1].split(MLM_END, 1)[0] + MLM_END]
    with open(path, "w") as f:
        f.write("\n".join(header + lines + kept) + "\n")


if __name__ == "__main__":
    sys.exit(main())
