#!/usr/bin/python3
"""Training benchmarks (part of `make bench`): attnkit_bench_train against the same model and
training step in PyTorch (bench/peers/train_peer.py), one fresh process per run, same threads, same
shapes. Writes docs/training-benchmarks.json (every run) and renders docs/training-benchmarks.md
from it (tests/python/test_docs_tables.py checks that the two agree).

  1. Throughput: a GPT-2-shaped causal LM (hidden 256, 4 layers, 4 heads, vocab 8192, batch 8,
     n 256), tokens/s per attention kind. The headline is like for like: attnkit against each
     kind's best PyTorch peer (scaled_dot_product_attention for softmax, fast-transformers' CPU
     causal-product kernel for linear and cosFormer; PyTorch 2.x from scripts/bench_venv.sh), both
     with attnkit's process set-up, ROUNDS rounds alternating the two sides; the ratio's median
     and its range over the rounds; "met" only when every round's ratio is on the target's side.
     Also both sides with the libraries' default set-up (ROUNDS rounds), and the natural eager
     PyTorch peer (one run: what the same model written without those kernels costs).
  2. LRA-style scaling: batch 1, n = 1K, 2K, 3K, 4K: tokens/s (steps/s) and extra peak memory of
     attnkit and the best peer, and each one's tokens/s at 4K as a share of its tokens/s at 1K.

    /usr/bin/python3 bench/train_compare.py --build BUILD --bench-python PY [--rounds 5] [--quick]
    /usr/bin/python3 bench/train_compare.py --report-only     # re-render the .md from the .json
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

from bench_process import run_json, thread_env
from compare import machine_description
from mlm_compare import BEGIN as MLM_BEGIN
from gnu_time import write_json
from thread_wait import LIBRARY_DEFAULTS, THREAD_WAIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_PATH = os.path.join(ROOT, "docs", "training-benchmarks.json")
MD_PATH = os.path.join(ROOT, "docs", "training-benchmarks.md")
BEGIN, END = "<!-- train-benchmarks:begin -->", "<!-- train-benchmarks:end -->"
KINDS = ("softmax", "linear", "cosformer")
PEER = os.path.join(ROOT, "bench", "peers", "train_peer.py")

# glibc settings equal to what attnkit::reuse_freed_memory() does inside attnkit's executables.
REUSE_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
# attnkit's process set-up, given to the peer: that malloc + attnkit's thread-wait settings. The
# libraries' default set-up, given to attnkit: --default-malloc + the libraries' own spin-waits.
ATTNKIT_SETUP = {"GLIBC_TUNABLES": REUSE_MALLOC, **THREAD_WAIT}
# Targets: issue 18 (softmax, like for like) and the training issue's ≥ 1.3× for the linear kinds.
TARGETS = {"softmax": 1.5, "linear": 1.3, "cosformer": 1.3}
SCALING_TARGET = 0.9
BEST_PEER = {"softmax": "PyTorch scaled_dot_product_attention (is_causal; its CPU flash kernel)",
             "linear": "fast-transformers 0.4.0 CausalLinearAttention math, its CPU causal-product kernel",
             "cosformer": "cosFormer's features through fast-transformers' CPU causal-product kernel"}


def case_args(kind, n, batch, steps):
    return ["--kind", kind, "--n", str(n), "--batch", str(batch), "--steps", str(steps), "--warmup", "1",
            "--threads", "2"]


def sides(build, bench_python):
    """name -> (command prefix, environment): the four set-ups the tables use."""
    ours = [os.path.join(build, "attnkit_bench_train")]
    return {
        "attnkit": (ours, None),
        "attnkit_default": (ours + ["--default-malloc"], LIBRARY_DEFAULTS),
        "peer_best": ([bench_python, PEER, "--attention", "best"], ATTNKIT_SETUP),
        "peer_best_default": ([bench_python, PEER, "--attention", "best"], None),
        "peer_eager": (["/usr/bin/python3", PEER, "--attention", "eager"], ATTNKIT_SETUP),
    }


def measure(a):
    setups = sides(a.build, a.bench_python)

    def one(side, kind, n, batch, steps, timeout):
        cmd, env = setups[side]
        r = run_json(cmd + case_args(kind, n, batch, steps), timeout, thread_env(2, env))
        print(f"  {side} {kind} n={n} batch={batch}: "
              + (r["error"] if "error" in r else f"{r['tokens_per_s']:,.0f} tokens/s"), flush=True)
        return r

    steps = 2 if a.quick else 5
    rounds = 1 if a.quick else a.rounds
    throughput = {}
    for kind in KINDS:
        runs = {side: [] for side in ("attnkit", "peer_best", "attnkit_default", "peer_best_default")}
        for _ in range(rounds):  # alternating: each round runs every side once, in the same order
            for side in runs:
                runs[side].append(one(side, kind, 256, 8, steps, 600))
        runs["peer_eager"] = [one("peer_eager", kind, 256, 8, steps, 600)]
        throughput[kind] = runs
    lengths = (1024, 2048) if a.quick else (1024, 2048, 3072, 4096)
    scaling = {kind: {side: [one(side, kind, n, 1, 2 if a.quick else 3, 900) for n in lengths]
                      for side in ("attnkit", "peer_best")} for kind in KINDS}
    isa = open("/proc/cpuinfo").read()
    return {
        "generated": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC",
        "machine": machine_description() + (", AVX-512" if "avx512f" in isa else ", AVX2 only"),
        "load_average_end": round(os.getloadavg()[0], 2),
        "rounds": rounds, "steps": steps,
        "throughput": {"n": 256, "batch": 8, "runs": throughput},
        "scaling": {"lengths": list(lengths), "runs": scaling},
    }


def tokens(r):
    return None if "error" in r else r["tokens_per_s"]


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def ratios(ours, peer):
    """Per-round ratios of the rounds where both sides ran."""
    return [tokens(o) / tokens(p) for o, p in zip(ours, peer) if tokens(o) and tokens(p)]


def summary(rs):
    if not rs:
        return "—"
    if len(rs) == 1:
        return f"{rs[0]:.2f}×"
    return f"{statistics.median(rs):.2f}× [{min(rs):.2f}, {max(rs):.2f}]"


def verdict(rs, target, rounds_needed=5):
    if len(rs) < rounds_needed:
        return f"not settled ({len(rs)} round{'s' if len(rs) != 1 else ''}; a verdict needs {rounds_needed})"
    if min(rs) >= target:
        return "met"
    if max(rs) < target:
        return "NOT met"
    return "not settled (the rounds' range spans the target)"


def median_of(rs, key="tokens_per_s"):
    xs = [r[key] for r in rs if "error" not in r]
    return statistics.median(xs) if xs else None


def markdown(res):
    rounds = res["rounds"]
    out = [BEGIN, "",
           f"Generated by `make bench` (`bench/train_compare.py`, from docs/training-benchmarks.json) on "
           f"{res['generated']} in {res['minutes']:.1f} min; do not edit by hand, run it again "
           "(`--report-only` re-renders).", "",
           "## How it was measured", "",
           f"- Machine: {res['machine']}; load average (1 min) when the run ended: "
           f"{res['load_average_end']:.2f} (other work on the machine distorts the timings).",
           "- attnkit: `attnkit_bench_train` (TaskModel, GPT-2 preset, fused kernels, LibTorch 1.13). Peer: "
           "`bench/peers/train_peer.py`, the same model and AdamW step in PyTorch; its attention, per kind, "
           "the best a PyTorch user has (`--attention best`, PyTorch 2.x of `scripts/bench_venv.sh`): "
           + "; ".join(f"{k}: {v}" for k, v in BEST_PEER.items())
           + ". The natural eager peer (`--attention eager`, Debian's python3-torch 1.13: explicit n×n mask, "
           "cumulative sums of φ(k)⊗v) is context only. 2 threads each (`OMP_NUM_THREADS` = "
           "`OPENBLAS_NUM_THREADS` = 2), one fresh process per run.",
           f"- tokens/s = batch·n·steps / time of the {res['steps']} timed steps after one untimed warm-up step; "
           "extra peak = ru_maxrss at the end − resident set before the first step.",
           "- Process set-ups. attnkit's: what `attnkit train` does at start-up (`src/process_start.cpp`: "
           "`reuse_freed_memory()`, short thread-pool spin-waits), given to the peer as "
           f"`GLIBC_TUNABLES={REUSE_MALLOC}` " + " ".join(f"`{k}={v}`" for k, v in THREAD_WAIT.items())
           + ". The libraries' defaults: attnkit with `--default-malloc` and "
           + " ".join(f"`{k}={v}`" for k, v in LIBRARY_DEFAULTS.items()) + ", the peer as it starts.",
           f"- Ratios: attnkit tokens/s over the peer's, per round; {rounds} round{'s' if rounds != 1 else ''}, each running every "
           "set-up once in the same order (alternating); the table gives the median ratio and [min, max] over "
           "the rounds. A target is \"met\" only when every round's ratio is at or above it, \"NOT met\" when "
           "every one is below, \"not settled\" otherwise.", "",
           "## Results", "",
           f"### Throughput: GPT-2-shaped LM (hidden 256, 4 layers, 4 heads, vocab 8192), batch "
           f"{res['throughput']['batch']}, n {res['throughput']['n']}", "",
           "| kind | attnkit tokens/s | best peer tokens/s | **speed-up, like for like** (both attnkit's set-up) "
           "| attnkit, default set-up | best peer, default set-up | speed-up, both defaults "
           "| eager peer tokens/s (1 run) | attnkit extra peak MiB | best peer extra peak MiB |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    targets = []
    for kind in KINDS:
        r = res["throughput"]["runs"][kind]
        like = ratios(r["attnkit"], r["peer_best"])
        default = ratios(r["attnkit_default"], r["peer_best_default"])
        out.append(f"| {kind} | {fmt(median_of(r['attnkit']))} | {fmt(median_of(r['peer_best']))} | "
                   f"**{summary(like)}** | {fmt(median_of(r['attnkit_default']))} | "
                   f"{fmt(median_of(r['peer_best_default']))} | {summary(default)} | "
                   f"{fmt(median_of(r['peer_eager']))} | {fmt(median_of(r['attnkit'], 'extra_peak_mib'))} | {fmt(median_of(r['peer_best'], 'extra_peak_mib'))} |")
        targets.append(f"- {kind}, like for like: {summary(like)} (target ≥ {TARGETS[kind]}×) — "
                       + verdict(like, TARGETS[kind]))
    failed = [f"{kind} {side}: {x['error']}" for kind in KINDS
              for side, rs in res["throughput"]["runs"][kind].items() for x in rs if "error" in x]
    if failed:
        out += ["", "Failed runs: " + "; ".join(failed) + "."]
    lengths = res["scaling"]["lengths"]
    out += ["", "### LRA-style scaling: the same model, batch 1, tokens/s (steps/s) and extra peak memory, "
            "both with attnkit's set-up, one run per cell", "",
            "| kind | impl | " + " | ".join(f"n={n}" for n in lengths) + f" | tokens/s at {lengths[-1]} vs {lengths[0]} |",
            "|---|---|" + "---|" * len(lengths) + "---|"]
    for kind in KINDS:
        for side, label in (("attnkit", "attnkit"), ("peer_best", "best peer")):
            rs = res["scaling"]["runs"][kind][side]
            cells = [r["error"] if "error" in r else
                     f"{r['tokens_per_s']:,.0f} ({1000 / r['step_ms']:.2f}/s), {r['extra_peak_mib']:,.0f} MiB"
                     for r in rs]
            first, last = tokens(rs[0]), tokens(rs[-1])
            share = f"{100 * last / first:.0f}%" if first and last else "—"
            out.append(f"| {kind} | {label} | " + " | ".join(cells) + f" | {share} |")
            if side == "attnkit" and kind != "softmax" and first and last:
                targets.append(f"- {kind}: attnkit's tokens/s at n={lengths[-1]} is {100 * last / first:.0f}% of "
                               f"n={lengths[0]} (target ≥ {100 * SCALING_TARGET:.0f}%; one run per cell) — "
                               + ("met" if last / first >= SCALING_TARGET else "NOT met"))
    out += ["", "### Targets", ""] + targets + ["", END]
    return "\n".join(out)


def write_markdown(res):
    """docs/training-benchmarks.md = title + the rendered region + bench/mlm_compare.py's section
    (between its markers, kept as it is) + whatever followed it."""
    tail = ""
    if os.path.exists(MD_PATH):
        text = open(MD_PATH).read()
        if MLM_BEGIN in text:
            tail = MLM_BEGIN + text.split(MLM_BEGIN, 1)[1]
    body = "# attnkit training benchmarks\n\n" + markdown(res) + "\n\n" + tail
    tmp = MD_PATH + ".tmp"
    with open(tmp, "w") as f:
        f.write(body.rstrip("\n") + "\n")
    os.replace(tmp, MD_PATH)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--bench-python", help="the bench venv's python (scripts/bench_venv.sh prints it)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 round, fewer steps, n up to 2K; nothing written")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from docs/training-benchmarks.json")
    a, _ = ap.parse_known_args()  # bench/run.sh passes compare.py's options along too
    if a.report_only:
        if not os.path.exists(JSON_PATH):
            sys.exit(f"train_compare: --report-only renders {os.path.relpath(JSON_PATH, ROOT)}, which no run has written "
                     "yet: run the benchmark first")
        with open(JSON_PATH) as f:
            write_markdown(json.load(f))
        return 0
    if not a.bench_python:
        ap.error("--bench-python (scripts/bench_venv.sh prints it) or --report-only")
    started = time.time()
    res = measure(a)
    res["minutes"] = round((time.time() - started) / 60, 1)
    print(markdown(res))
    if a.quick or a.no_write:
        return 0
    write_json(JSON_PATH, res)
    write_markdown(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
