#!/usr/bin/python3
"""attnkit vs the attention a user would pick instead: speed and peak memory, one process per case.

    /usr/bin/python3 bench/compare.py [--build build] [--quick] [--out docs/benchmarks.md] ...

For every kind {softmax, linear, cosformer} × n × {fwd, fwdbwd} × {non-causal, causal} it runs
build/attnkit_bench_attention and its peers (same CLI, same JSON line, same shapes and threads):
  - PyTorch 2.x (bench/peers/torch2_peer.py under the bench venv of scripts/bench_venv.sh):
    scaled_dot_product_attention for softmax, the cosFormer authors' formulation for cosFormer;
  - fast-transformers' compiled CPU causal-product kernel (linear; cosFormer features, causal);
  - PyTorch 1.13 eager (bench/peers/attention_peer.py, Debian's python3-torch), the baseline.
Before timing, every peer's output and input gradients are compared with a float64 oracle on a
small case (bench/peers/peer_check.py); a peer that fails is not timed. Then it prints a table
(speed-ups, extra peak memory, achieved GFLOP/s next to a measured sgemm GFLOP/s), the growth
t(16384)/t(4096) of linear/cosFormer under three malloc settings, the GPT-2-shaped training step
against eager (bench/train_compare.py's case), evaluates the performance targets and writes
everything to a Markdown report. It also runs bench/torch_ops_vs_eager.py (torch.ops.attnkit.*
from Python against the same eager formulas) and puts its table in the report.

Cases that would not fit are not run: for each (implementation, kind, mode, causal) the cases run
in increasing n, and the next case's extra peak memory and call time are extrapolated from the
ones already measured (softmax: a + b·n², linear/cosFormer: a + b·n, fitted through the two
largest measured n; from one point, pure scaling). A case whose estimate exceeds the memory budget
or the per-case timeout is reported as "skipped (est. …)". A watchdog also kills any case whose
resident set passes the budget, and every case has a timeout.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from thread_wait import LIBRARY_DEFAULTS, THREAD_WAIT, with_thread_wait

REPO = Path(__file__).resolve().parent.parent
PEER = REPO / "bench" / "peers" / "attention_peer.py"
TORCH2_PEER = REPO / "bench" / "peers" / "torch2_peer.py"
BENCH_PYTHON = Path(os.environ.get("ATTNKIT_CACHE", Path.home() / ".cache" / "attnkit")) \
    / "venv-bench" / "bin" / "python"
MACHINE_REFERENCE = REPO / "bench" / "peers" / "machine_reference.py"
TORCH_OPS = REPO / "bench" / "torch_ops_vs_eager.py"

KINDS = ["softmax", "linear", "cosformer"]
MODES = ["fwd", "fwdbwd"]
FULL_N = [256, 1024, 4096, 16384]
QUICK_N = [256, 1024]
# Implementations per kind: attnkit, then its peers, strongest first (DESIGN.md).
KIND_IMPLS = {"softmax": ["attnkit", "sdpa", "eager"],
              "linear": ["attnkit", "fast-transformers", "eager"],
              "cosformer": ["attnkit", "cosformer", "fast-transformers", "eager"]}
IMPL_NAMES = {"attnkit": "attnkit", "sdpa": "PyTorch 2.x scaled_dot_product_attention",
              "cosformer": "cosFormer official formulation (PyTorch 2.x eager)",
              "fast-transformers": "fast-transformers 0.4.0 (CPU causal-product kernel)",
              "eager": "PyTorch 1.13 eager"}
# Table column groups: the PyTorch 2.x peer of each kind, fast-transformers, eager 1.13.
PEER_COLUMNS = [("PyTorch 2.x", {"softmax": "sdpa", "cosformer": "cosformer"}),
                ("fast-transformers", {"linear": "fast-transformers",
                                       "cosformer": "fast-transformers"}),
                ("eager 1.13", {"softmax": "eager", "linear": "eager", "cosformer": "eager"})]


def impl_supports(impl, kind, causal):
    """fast-transformers' kernel is the causal product; its non-causal linear attention is its
    LinearAttention (einsums); for cosFormer only the causal case goes through the kernel."""
    return impl in KIND_IMPLS[kind] and (causal or (impl, kind) != ("fast-transformers",
                                                                    "cosformer"))
GIB = 1024.0


# --------------------------------------------------------------------------------------------
# FLOP model (the algorithm's multiply-adds ×2, not what a particular implementation executes).

def attention_flops(kind, n, mode, causal, batch, heads, dim):
    """softmax: q kᵀ and P v, 2·n²·d each per head (half of the matrix when causal); backward
    ≈ 2.5× forward (dV, dP, dQ, dK plus recomputing q kᵀ). linear/cosFormer with feature size m
    (d for elu, 2d for cosFormer): Σ φk [v, 1]ᵀ and φq·S, 2·n·m·(d+1) each per head, the same for
    the causal prefix-sum form; backward = 2× forward (the gradients of both products)."""
    if kind == "softmax":
        forward = 4.0 * n * n * dim * heads * batch * (0.5 if causal else 1.0)
        backward_factor = 2.5
    else:
        m = dim if kind == "linear" else 2 * dim
        forward = 4.0 * n * m * (dim + 1) * heads * batch
        backward_factor = 2.0
    return forward * (1.0 + backward_factor) if mode == "fwdbwd" else forward


def growth_exponent(kind):
    """How extra memory and time grow with n in the worst implementation of the kind."""
    return 2 if kind == "softmax" else 1


def extrapolate(points, n, exponent):
    """Fit y = a + b·n^p through the two largest measured (n, y); one point: y·(n/n0)^p."""
    if not points:
        return None
    points = sorted(points)
    n1, y1 = points[-1]
    if len(points) == 1:
        return y1 * (n / n1) ** exponent
    n0, y0 = points[-2]
    b = max(0.0, (y1 - y0) / (n1 ** exponent - n0 ** exponent))
    a = y1 - b * n1 ** exponent
    return max(a + b * n ** exponent, y1)


# --------------------------------------------------------------------------------------------
# Running one case.

def peer_command(impl, args):
    if impl == "attnkit":
        return [str(Path(args.build) / "attnkit_bench_attention")]
    if impl == "eager":
        return [args.python, str(PEER)]
    return [args.bench_python, str(TORCH2_PEER), "--impl", impl]


def case_command(impl, args, kind, n, mode, causal):
    cmd = peer_command(impl, args)
    cmd += ["--kind", kind, "--n", str(n), "--mode", mode, "--threads", str(args.threads),
            "--repeat", str(args.repeat), "--min-time", str(args.min_time),
            "--max-time", str(args.max_time), "--batch", str(args.batch),
            "--heads", str(args.heads), "--dim", str(args.dim)]
    return cmd + (["--causal"] if causal else [])


# glibc malloc's own steady state: it raises its mmap threshold (to at most 32 MiB on 64-bit) and
# its trim threshold (to twice that) as a process frees large blocks. A fresh process starts at
# 128 KiB instead and hands every freed block > 128 KiB back to the OS, so each call re-faults its
# temporaries; on machines with slow page faults that dominates small cases. Both sides get the
# same setting, equal to what a long-running process converges to; blocks > 32 MiB (e.g. n×n
# score matrices) are still mapped and faulted in per call, as in any process.
MALLOC_STEADY_STATE = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864"


def child_env(threads, malloc_tuning=True):
    env = dict(os.environ)
    with_thread_wait(env)  # both sides: attnkit's binaries set these themselves
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    if malloc_tuning:
        env["GLIBC_TUNABLES"] = MALLOC_STEADY_STATE
    return env


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGESIZE") / 2 ** 20
    except (OSError, IndexError, ValueError):
        return 0.0


def run_process(cmd, env, timeout_s, budget_mib):
    """Runs cmd with a timeout and an RSS watchdog. Returns (JSON lines it printed, status);
    status is "ok" only when it exited 0 and printed at least one JSON line."""
    start = time.monotonic()
    # Output goes to files, not pipes: a child never blocks on a full pipe while we poll.
    out_file, err_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=out_file, stderr=err_file, env=env, text=True)
    status = None
    while proc.poll() is None:
        if time.monotonic() - start > timeout_s:
            status = f"timeout (> {timeout_s:.0f} s)"
        elif rss_mib(proc.pid) > budget_mib:
            status = f"killed (RSS > {budget_mib / GIB:.1f} GiB budget)"
        if status:
            proc.kill()
            break
        time.sleep(0.05)
    proc.wait()
    out_file.seek(0)
    err_file.seek(0)
    stdout, stderr = out_file.read(), err_file.read()
    out_file.close()
    err_file.close()
    if status:
        return [], status
    if proc.returncode != 0:
        last = (stderr.strip().splitlines() or ["?"])[-1]
        return [], f"failed (exit {proc.returncode}: {last[:120]})"
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return records, "ok" if records else "failed (no JSON output)"


class History:
    """Measured cases per (impl, kind, mode, causal), for the skip estimates."""

    def __init__(self):
        self.memory = {}   # key -> [(n, extra peak MiB)]
        self.time = {}     # key -> [(n, seconds of one call)]
        self.failed = {}   # key -> smallest n that timed out, was killed or failed

    def estimate(self, key, kind, n):
        p = growth_exponent(kind)
        return (extrapolate(self.memory.get(key, []), n, p),
                extrapolate(self.time.get(key, []), n, p))

    def record(self, key, n, result):
        self.memory.setdefault(key, []).append((n, result["extra_peak_mib"]))
        one_call_s = min(result["first_call_ms"], result["median_ms"]) / 1e3
        self.time.setdefault(key, []).append((n, one_call_s))


def check_peers(args, kinds, causal_values):
    """Runs every peer's --check (float64 oracle, small case). Returns {(impl, kind, causal):
    (ok, text)}; a peer whose check did not pass is not timed."""
    checks = {}
    for kind in kinds:
        for causal in causal_values:
            for impl in KIND_IMPLS[kind][1:]:
                if not impl_supports(impl, kind, causal):
                    continue
                if impl != "eager" and not Path(args.bench_python).exists():
                    checks[(impl, kind, causal)] = (False, "no bench venv (scripts/bench_venv.sh)")
                    continue
                cmd = peer_command(impl, args) + ["--kind", kind, "--check"] + (
                    ["--causal"] if causal else [])
                records, status = run_process(cmd, args.env, 300, args.budget_mib)
                if records:
                    r = records[-1]
                    worst = max(r["errors"].values())
                    text = (f"largest error {worst:.2g}× the tolerance (output and q/k/v "
                            f"gradients vs the float64 oracle)")
                    checks[(impl, kind, causal)] = (r["ok"], text)
                else:
                    checks[(impl, kind, causal)] = (False, status)
                ok, text = checks[(impl, kind, causal)]
                log(f"check {impl:17s} {kind:9s} causal={int(causal)}: "
                    f"{'ok' if ok else 'FAILED'} ({text})")
    return checks


def run_case(impl, args, history, kind, n, mode, causal, baseline_mib):
    key = (impl, kind, mode, causal)
    if impl != "attnkit":
        ok, text = args.checks.get((impl, kind, causal), (False, "not checked"))
        if not ok:
            return None, "not run: check failed" if "tolerance" in text else f"not run ({text})"
    if key in history.failed:
        return None, f"skipped (n={history.failed[key]} did not finish)"
    est_mib, est_s = history.estimate(key, kind, n)
    # Estimated skips are not recorded as failures: larger n get their own (larger) estimate.
    if est_mib is not None and est_mib + baseline_mib.get(impl, 0.0) > args.budget_mib:
        return None, f"skipped (est. {est_mib / GIB:.1f} GiB)"
    if est_s is not None and est_s > args.timeout:
        return None, f"skipped (est. {est_s:.0f} s per call)"
    records, status = run_process(case_command(impl, args, kind, n, mode, causal), args.env,
                                  args.timeout, args.budget_mib)
    result = records[-1] if records else None
    if result is None:
        history.failed[key] = n
    else:
        history.record(key, n, result)
        baseline_mib[impl] = max(baseline_mib.get(impl, 0.0), result["baseline_rss_mib"])
    return result, status


# --------------------------------------------------------------------------------------------
# Report.

def fmt_ms(x):
    return "—" if x is None else (f"{x:.3g}" if x < 100 else f"{x:.0f}")


def fmt_mib(x):
    return "—" if x is None else f"{x:.1f}"


def machine_description():
    model, cpus = platform.processor() or "unknown CPU", os.cpu_count()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in lscpu.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "Model name":
                model = value.strip()
            elif name.strip() == "CPU(s)":
                cpus = value.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    usable = len(os.sched_getaffinity(0))
    with open("/proc/meminfo") as meminfo:
        total_kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo.read()).group(1))
    return f"{model}, {cpus} CPU(s) ({usable} usable by this process), " \
           f"{total_kib / 2 ** 20:.1f} GiB RAM"


def result_of(row, impl):
    return row["results"].get(impl)


def ms_of(row, impl):
    r = result_of(row, impl)
    return r["median_ms"] if r else None


def mib_of(row, impl):
    r = result_of(row, impl)
    return r["extra_peak_mib"] if r else None


def speedup(row, impl):
    """impl's time / attnkit's time."""
    a, p = ms_of(row, "attnkit"), ms_of(row, impl)
    return p / a if a and p else None


def memory_ratio(row, impl):
    """attnkit's extra peak as a fraction of impl's; undefined when impl needs ~nothing."""
    a, p = mib_of(row, "attnkit"), mib_of(row, impl)
    return a / p if a is not None and p and p >= 1.0 else None


def gflops_of(row):
    a = ms_of(row, "attnkit")
    return row["flops"] / (a / 1e3) / 1e9 if a else None


def results_table(rows, sgemm_gflops):
    header = ["kind", "n", "mode", "causal", "attnkit ms", "attnkit extra MiB", "GFLOP/s",
              "% of sgemm"]
    for title, _ in PEER_COLUMNS:
        header += [f"{title} ms (attnkit ×)", f"{title} extra MiB (attnkit %)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        g = gflops_of(row)
        a = result_of(row, "attnkit")
        cells = [row["kind"], str(row["n"]), row["mode"], "yes" if row["causal"] else "no",
                 fmt_ms(a["median_ms"]) if a else row["status"].get("attnkit", "—"),
                 fmt_mib(mib_of(row, "attnkit")),
                 f"{g:.1f}" if g else "—",
                 f"{100 * g / sgemm_gflops:.0f}%" if g and sgemm_gflops else "—"]
        for _, by_kind in PEER_COLUMNS:
            impl = by_kind.get(row["kind"])
            if impl is None or impl not in row["status"]:
                cells += ["n/a", "n/a"]
                continue
            r = result_of(row, impl)
            if not r:
                cells += [row["status"][impl], "—"]
                continue
            s, m = speedup(row, impl), memory_ratio(row, impl)
            cells += [fmt_ms(r["median_ms"]) + (f" ({s:.1f}×)" if s else ""),
                      fmt_mib(r["extra_peak_mib"]) + (f" ({100 * m:.0f}%)" if m is not None
                                                      else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def find(rows, kind, n, mode, causal):
    for row in rows:
        if (row["kind"], row["n"], row["mode"], row["causal"]) == (kind, n, mode, causal):
            return row
    return None


def check(description, value, ok):
    """One measured check: ok is True/False, or None when the case was not measured."""
    return {"description": description, "value": value, "ok": ok}


# Malloc settings of the growth table: the benchmark's own (MALLOC_STEADY_STATE, every block
# above 32 MiB a fresh mmap), glibc's defaults (a Python user of libattnkit_ops.so: nothing in
# src/torch_ops changes malloc), and what the CLI sets at start-up (tools/attnkit/main.cpp calls
# attnkit::reuse_freed_memory(): mmap off, 1 GiB trim threshold), as GLIBC_TUNABLES.
CLI_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
GROWTH_SETTINGS = [("bench", "benchmark's tunables (32 MiB mmap threshold)"),
                   ("default", "glibc default (Python: libattnkit_ops.so)"),
                   ("cli", "attnkit CLI (reuse_freed_memory)")]
GROWTH_SMALL, GROWTH_LARGE, GROWTH_MAX = 4096, 16384, 4.4


def growth_cases(args, rows):
    """attnkit linear/cosFormer at GROWTH_SMALL and GROWTH_LARGE under the default and CLI malloc
    settings (the benchmark's own comes from the main table). Returns
    {(kind, mode, causal, setting): t(large)/t(small)}."""
    growth = {}
    small_n, large_n = args.growth_n
    if not {small_n, large_n} <= set(args.n):
        return growth
    envs = {"default": child_env(args.threads, malloc_tuning=False),
            "cli": dict(child_env(args.threads, malloc_tuning=False), GLIBC_TUNABLES=CLI_MALLOC)}
    for kind in [k for k in args.kinds if k != "softmax"]:
        for mode in args.modes:
            for causal in args.causal_values:
                small = find(rows, kind, small_n, mode, causal)
                large = find(rows, kind, large_n, mode, causal)
                if small and large and ms_of(small, "attnkit") and ms_of(large, "attnkit"):
                    growth[(kind, mode, causal, "bench")] = (ms_of(large, "attnkit")
                                                             / ms_of(small, "attnkit"))
                for setting, env in envs.items():
                    times = []
                    for n in (small_n, large_n):
                        records, status = run_process(
                            case_command("attnkit", args, kind, n, mode, causal), env,
                            args.timeout, args.budget_mib)
                        times.append(records[-1]["median_ms"] if records else None)
                        log(f"growth {kind:9s} n={n:<5d} {mode:6s} causal={int(causal)} "
                            f"malloc={setting:7s} " +
                            (f"{times[-1]:10.2f} ms" if times[-1] else status))
                    if all(times):
                        growth[(kind, mode, causal, setting)] = times[1] / times[0]
    return growth


def growth_markdown(growth):
    if not growth:
        return "_not run (needs n = 4096 and 16384)_"
    header = ["kind", "mode", "causal"] + [title for _, title in GROWTH_SETTINGS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = sorted({k[:3] for k in growth}, key=lambda k: (KINDS.index(k[0]),
                                                          MODES.index(k[1]), k[2]))
    for kind, mode, causal in keys:
        cells = [kind, mode, "yes" if causal else "no"]
        for setting, _ in GROWTH_SETTINGS:
            g = growth.get((kind, mode, causal, setting))
            cells.append(f"{g:.2f}" if g else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def evaluate_targets(rows, sgemm_gflops, growth, train):
    def row_at(kind, mode, causal, n=4096):
        return find(rows, kind, n, mode, causal)

    def sgemm_check(kind, mode, causal, minimum):
        row = row_at(kind, mode, causal)
        g = gflops_of(row) if row else None
        f = g / sgemm_gflops if g and sgemm_gflops else None
        label = f"{kind} {'causal' if causal else 'non-causal'} {mode} n=4096"
        return check(f"{label} ≥ {100 * minimum:g}% of sgemm FLOP/s",
                     f"{100 * f:.0f}% ({g:.0f} of {sgemm_gflops:.0f} GFLOP/s)" if f
                     else "not measured", f >= minimum if f else None)

    def speed_check(kind, mode, causal, impl, minimum):
        row = row_at(kind, mode, causal)
        s = speedup(row, impl) if row else None
        label = f"{kind} {'causal' if causal else 'non-causal'} {mode} n=4096"
        return check(f"{label} ≥ {minimum:g}× faster than {IMPL_NAMES[impl]}",
                     f"{s:.2f}× ({ms_of(row, 'attnkit'):.0f} vs {ms_of(row, impl):.0f} ms)"
                     if s else "not measured", s >= minimum if s else None)

    def memory_check(kind, mode, causal, impl, maximum):
        row = row_at(kind, mode, causal)
        r = memory_ratio(row, impl) if row else None
        label = f"{kind} {'causal' if causal else 'non-causal'} {mode} n=4096"
        return check(f"{label} extra peak ≤ {100 * maximum:g}% of {IMPL_NAMES[impl]}'s",
                     f"{100 * r:.1f}% ({mib_of(row, 'attnkit'):.0f} vs {mib_of(row, impl):.0f} MiB)"
                     if r is not None else "not measured", r <= maximum if r is not None else None)

    targets = [("Softmax forward ≥ 60% of the measured sgemm FLOP/s",
                [sgemm_check("softmax", "fwd", c, 0.6) for c in (False, True)])]
    softmax = []
    for causal in (False, True):
        softmax += [speed_check("softmax", "fwdbwd", causal, "sdpa", 1.2),
                    memory_check("softmax", "fwdbwd", causal, "sdpa", 1.0)]
    targets.append(("Softmax fwd+bwd ≥ 1.2× faster than PyTorch 2.x SDPA with no more extra "
                    "peak memory", softmax))
    for kind in ("linear", "cosformer"):
        targets.append((f"Causal {kind} fwd+bwd ≥ 35% of sgemm FLOP/s, ≥ 5× faster than "
                        "fast-transformers' CPU kernel, extra peak ≤ 5% of eager's", [
                            sgemm_check(kind, "fwdbwd", True, 0.35),
                            speed_check(kind, "fwdbwd", True, "fast-transformers", 5),
                            memory_check(kind, "fwdbwd", True, "eager", 0.05)]))
    growth_checks = []
    for setting in ("default", "cli"):
        title = dict(GROWTH_SETTINGS)[setting]
        for kind in ("linear", "cosformer"):
            for mode in MODES:
                for causal in (False, True):
                    g = growth.get((kind, mode, causal, setting))
                    growth_checks.append(check(
                        f"{kind} {mode} {'causal' if causal else 'non-causal'}, {title}: "
                        f"t({GROWTH_LARGE})/t({GROWTH_SMALL}) ≤ {GROWTH_MAX:g}",
                        f"{g:.2f}" if g else "not measured", g <= GROWTH_MAX if g else None))
    targets.append((f"Linear/cosFormer growth t({GROWTH_LARGE})/t({GROWTH_SMALL}) ≤ "
                    f"{GROWTH_MAX:g} under the users' malloc settings", growth_checks))
    train_checks = []
    for setting, key in (("both the libraries' defaults", "default"), ("both attnkit's set-up", "reuse")):
        ratio = train.get(key) if train else None
        train_checks.append(check(f"softmax, {setting}: attnkit / eager tokens/s ≥ 1.5×",
                                  f"{ratio:.2f}×" if ratio else "not measured",
                                  ratio >= 1.5 if ratio else None))
    targets.append(("GPT-2-shaped training step (softmax) ≥ 1.5× PyTorch 1.13 eager, "
                    "like-for-like", train_checks))

    big_checks = []
    for causal in (False, True):
        row = find(rows, "softmax", 16384, "fwdbwd", causal)
        a = result_of(row, "attnkit") if row else None
        if a:
            value, ok = (f"{a['peak_rss_mib']:.0f} MiB peak ({a['extra_peak_mib']:.0f} MiB extra)",
                         a["peak_rss_mib"] <= 1024)
        elif row:  # not run: over the memory budget (≥ 1 GiB) by estimate or watchdog -> not met
            status = row["status"].get("attnkit", "")
            value, ok = status, (False if status.startswith(("skipped (est.", "killed")) else None)
        else:
            value, ok = "not measured", None
        big_checks.append(check(
            f"softmax {'causal' if causal else 'non-causal'} fwd+bwd n=16384 peak RSS ≤ 1 GiB",
            value, ok))
    targets.append(("Softmax fwd+bwd at n=16384 runs within 1 GiB peak (whole process)",
                    big_checks))
    return targets


def train_target_case(args):
    """bench/train_compare.py's throughput case for softmax (GPT-2-shaped LM, batch 8, n 256):
    attnkit and the eager peer, both with the libraries' defaults (glibc's malloc, libgomp's and
    OpenBLAS's spin-waits) and both with attnkit's process set-up (its malloc and thread waits).
    Returns {"default": ratio, "reuse": ratio} of tokens/s."""
    sys.path.insert(0, str(REPO / "bench"))
    import train_compare
    steps = 2 if args.quick else 5
    cli = ["--kind", "softmax", "--n", "256", "--batch", "8", "--steps", str(steps),
           "--warmup", "1", "--threads", str(args.threads)]
    ours = [str(Path(args.build) / "attnkit_bench_train"), *cli]
    peer = [args.python, str(REPO / "bench" / "peers" / "train_peer.py"), *cli]
    if not Path(ours[0]).exists():
        log("train target: attnkit_bench_train not built; not measured")
        return {}
    tokens = {
        "ours_reuse": train_compare.run(ours, 600),
        "ours_default": train_compare.run(ours + ["--default-malloc"], 600, LIBRARY_DEFAULTS),
        "peer_default": train_compare.run(peer, 600, LIBRARY_DEFAULTS),
        "peer_reuse": train_compare.run(peer, 600, train_compare.PEER_AS_ATTNKIT),
    }
    t = {k: train_compare.value(r, "tokens_per_s") for k, r in tokens.items()}
    log("train target (tokens/s): " + ", ".join(f"{k} {v:.0f}" if v else f"{k} —"
                                                 for k, v in t.items()))
    ratio = lambda x, y: x / y if x and y else None  # noqa: E731
    return {"default": ratio(t["ours_default"], t["peer_default"]),
            "reuse": ratio(t["ours_reuse"], t["peer_reuse"]), "tokens_per_s": t}


def targets_markdown(targets):
    lines = []
    for title, checks in targets:
        oks = [c["ok"] for c in checks]
        verdict = ("**met**" if all(o is True for o in oks) else
                   "**not met**" if any(o is False for o in oks) else "**not measured**")
        lines.append(f"- {title}: {verdict}")
        for c in checks:
            mark = {True: "met", False: "NOT met", None: "not measured"}[c["ok"]]
            value = "" if c["value"] == "not measured" else f"{c['value']} — "
            lines.append(f"  - {c['description']}: {value}{mark}")
    return "\n".join(lines)


def torch_ops_markdown(records, rows):
    if not records:
        return "_not run_"
    header = ["kind", "n", "mode", "causal", "torch.ops ms", "C++ binary ms", "eager ms",
              "eager / torch.ops", "max |Δ| vs eager"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        row = find(rows, r["kind"], r["n"], r["mode"], r["causal"])
        cpp = ms_of(row, "attnkit") if row else None
        eager = r.get("eager_ms")
        cells = [r["kind"], str(r["n"]), r["mode"], "yes" if r["causal"] else "no",
                 fmt_ms(r["ops_ms"]), fmt_ms(cpp), fmt_ms(eager),
                 f"{eager / r['ops_ms']:.1f}×" if eager else "—",
                 f"{r['max_abs_diff']:.1e}" if r.get("max_abs_diff") is not None else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def method_bullets(args, reference):
    """How this run measured, one Markdown bullet per item (values from this run)."""
    malloc = (f"`GLIBC_TUNABLES={MALLOC_STEADY_STATE}` on both sides: glibc's own thresholds of a "
              "long-running process, set from the start, so freed blocks ≤ 32 MiB are reused "
              "instead of being faulted in again on every call" if not args.fresh_malloc else
              "glibc malloc left at its fresh-process thresholds (--fresh-malloc)")
    if reference:
        sgemm = (f"{reference['median_gflops']:.1f} GFLOP/s median, "
                 f"{reference['best_gflops']:.1f} best")
        touch = (f"filling a newly allocated 512 MiB block runs at "
                 f"{reference['first_touch_gib_s']:.2f} GiB/s (page faults included), an already "
                 f"touched one at {reference['touched_fill_gib_s']:.1f} GiB/s; per-call "
                 f"temporaries > 32 MiB pay the first rate on every call, so memory-hungry "
                 f"implementations lose more here than on a machine with cheap page faults")
    else:
        sgemm = touch = "not measured"
    return [
        f"Machine: {machine_description()}. Load average (1 min) when the run started: "
        f"{args.start_load:.2f} (other work on the machine distorts the timings).",
        f"Threads: {args.threads} on both sides (`at::set_num_threads` / `torch.set_num_threads`; "
        f"`OMP_NUM_THREADS` = `OPENBLAS_NUM_THREADS` = {args.threads}). "
        f"LibTorch/python3-torch {torch_version(args, args.python)}.",
        f"Shapes: batch {args.batch}, heads {args.heads}, head dim {args.dim}, float32, "
        f"n ∈ {{{', '.join(map(str, args.n))}}}; fwd and fwd+bwd; causal and non-causal.",
        f"attnkit: `{Path(args.build).name}/attnkit_bench_attention` (C++ `attnkit::ops::*`).",
        f"PyTorch 2.x ({torch_version(args, args.bench_python)}, `bench/peers/torch2_peer.py` in "
        "the bench venv of `scripts/bench_venv.sh`): softmax = "
        "`torch.nn.functional.scaled_dot_product_attention` (`is_causal`, no mask; its CPU flash "
        "kernel); cosFormer = the cosFormer authors' formulation (ReLU features, [sin, cos] "
        "reweighting, non-causal via two matrix products, causal via cumsum of φ(k)⊗v).",
        "fast-transformers 0.4.0: its CPU causal-product kernel (`causal_product_cpu.cpp` from "
        "the PyPI source distribution, built by `scripts/bench_venv.sh` with the flags its "
        "setup.py gives on this Python: -O2 -fopenmp -ffast-math), called the way its "
        "`CausalLinearAttention` calls it (elu+1 features, [batch, n, heads, dim] inputs permuted "
        "to contiguous copies, normaliser from cumsum); non-causal linear = its `LinearAttention` "
        "einsums; causal cosFormer = cosFormer's features through the same kernel.",
        "PyTorch 1.13 eager (Debian's python3-torch, `bench/peers/attention_peer.py`), the "
        "baseline: the formulas written plainly (softmax with an explicit n×n matrix and -inf "
        "causal mask; linear/cosFormer causal via cumsum of φk⊗v).",
        "Peer checks: before timing, each peer's output and the gradients of q, k, v are compared "
        "with a float64 oracle (explicit n×n matrix, `bench/peers/peer_check.py`) on batch 2, "
        "3 heads, n 37, dim 16 (tolerance 1e-4 + 1e-3·max|reference|); a peer that fails is not "
        "timed. Results below.",
        f"One fresh process per case. Time: median of the samples (at least {args.repeat} samples "
        f"and {args.min_time:g} s, no new sample past {args.max_time:g} s; a first call slower "
        f"than {args.max_time / 2:g} s is the only sample). fwd: inputs without grad; fwd+bwd: "
        "`out.backward(grad)` with grads of q, k, v.",
        "Extra peak memory: `getrusage` ru_maxrss at the end minus the resident set before the "
        "first call (inputs already allocated). In the table, a peer's time is followed by "
        "attnkit's speed-up over it and its extra peak by attnkit's as a percentage of it.",
        f"Malloc: {malloc}.",
        "Thread waits: " + " ".join(f"`{k}={v}`" for k, v in THREAD_WAIT.items())
        + " on both sides (attnkit's executables start with them, `src/process_start.cpp`; "
        "the peers are given them), unless the environment of the run set them.",
        "GFLOP/s: algorithmic FLOPs / attnkit median time. softmax fwd 4·n²·d·H (half if "
        "causal), fwd+bwd 3.5× fwd; linear/cosFormer fwd 4·n·m·(d+1)·H with m = d (elu) or 2d "
        "(cosFormer), fwd+bwd 3× fwd.",
        f"Measured sgemm (torch.mm 2048³ float32, {args.threads} threads, same run): {sgemm}.",
        f"Fresh memory: {touch}.",
        f"Skips: a case is not run when its extra peak memory, extrapolated from the same "
        f"implementation's measured smaller n (a + b·n² for softmax, a + b·n for "
        f"linear/cosFormer), "
        f"would exceed the {args.budget_mib / GIB:.1f} GiB budget, or its extrapolated call time "
        f"the {args.timeout:g} s per-case timeout. A watchdog kills any case past the budget.",
    ]


NOTES = Path(__file__).resolve().parent / "benchmark-notes.md"


def notes_markdown():
    """bench/benchmark-notes.md (hand-written: why a target is missed, what is next), if any."""
    if not NOTES.is_file():
        return ""
    return "\n" + NOTES.read_text().strip() + "\n"


def checks_markdown(checks):
    lines = ["| peer | kind | causal | result |", "|---|---|---|---|"]
    for (impl, kind, causal), (ok, text) in sorted(checks.items()):
        lines.append(f"| {IMPL_NAMES[impl]} | {kind} | {'yes' if causal else 'no'} | "
                     f"{'ok' if ok else 'FAILED'}: {text} |")
    return "\n".join(lines)


def write_report(path, args, rows, reference, targets, torch_ops_records, elapsed_s, growth):
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    sgemm_gflops = reference["median_gflops"] if reference else None
    bullets = "\n".join("- " + b for b in method_bullets(args, reference))
    build = Path(args.build).name
    text = f"""# attnkit benchmarks

Generated by `make bench` (`bench/run.sh` → `bench/compare.py`) on {now} in
{elapsed_s / 60:.1f} min; do not edit by hand, run it again.

## How it was measured

{bullets}

## Results

{results_table(rows, sgemm_gflops)}

### Peer checks

{checks_markdown(args.checks)}

### Growth of linear/cosFormer: t({GROWTH_LARGE}) / t({GROWTH_SMALL}), attnkit, three malloc settings

The benchmark's column comes from the table above; the other two are separate runs of the same
binary with `GLIBC_TUNABLES` unset (glibc's defaults: what a Python user of `libattnkit_ops.so`
gets, since nothing in `src/torch_ops/` changes malloc) and with
`GLIBC_TUNABLES={CLI_MALLOC}` (what `tools/attnkit` sets at start-up through
`attnkit::reuse_freed_memory()`).

{growth_markdown(growth)}

## Targets

Evaluated by `bench/compare.py` (2 threads, n = 4096 unless said otherwise). The training step
is `bench/train_compare.py`'s throughput case (GPT-2-shaped LM, hidden 256, 4 layers, batch 8,
n 256) run by `compare.py` with the same process set-up on both sides: the libraries' defaults
(glibc's malloc, libgomp's and OpenBLAS's spin-waits), or attnkit's (its malloc and thread waits).

{targets_markdown(targets)}
{notes_markdown()}
## Python: torch.ops.attnkit vs eager

`bench/torch_ops_vs_eager.py` loads `{build}/libattnkit_ops.so` in one Python process and times
`torch.ops.attnkit.*` against the same eager formulas (same process, threads and malloc setting,
no memory measurement). "C++ binary ms" is the attnkit column of the table above: torch.ops
matching it shows that Python users get the same kernels. max |Δ| compares the forward outputs.

{torch_ops_markdown(torch_ops_records, rows)}

## Reproduce

```
make bench                                # build, then bash bench/run.sh build
bash bench/run.sh build --quick           # n ∈ {{256, 1024}} smoke run (prints, writes no report)
make bench BENCH=attention                # only this report (attention + the training target)
/usr/bin/python3 bench/compare.py --help  # --kinds, --n, --modes, --causal, budgets, --json
```
"""
    Path(path).write_text(text)


_TORCH_VERSION = {}


def torch_version(args, python):
    if python not in _TORCH_VERSION:
        try:
            out = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout
        except OSError:
            out = ""
        _TORCH_VERSION[python] = out.strip() or "not installed"
    return _TORCH_VERSION[python]


# --------------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--build", default=str(REPO / "build"), help="build dir with the binaries")
    p.add_argument("--python", default="/usr/bin/python3", help="PyTorch 1.13 peer interpreter")
    p.add_argument("--bench-python", default=str(BENCH_PYTHON),
                   help="PyTorch 2.x interpreter (scripts/bench_venv.sh makes it)")
    p.add_argument("--no-growth", action="store_true", help="skip the malloc growth runs")
    p.add_argument("--growth-n", nargs=2, type=int, default=[GROWTH_SMALL, GROWTH_LARGE],
                   metavar=("SMALL", "LARGE"), help="n of the growth ratio (both must be in --n)")
    p.add_argument("--no-train-target", action="store_true",
                   help="skip the GPT-2-shaped training-step target")
    p.add_argument("--quick", action="store_true", help="n ∈ {256, 1024}; no report unless --out")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=KINDS)
    p.add_argument("--n", nargs="+", type=int, default=None)
    p.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    p.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5, help="samples per case at least")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of samples at least")
    p.add_argument("--max-time", type=float, default=6.0, help="no sample past this many s")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per case")
    p.add_argument("--budget-gib", type=float, default=8.0,
                   help="memory budget per case (the machine is shared: keep well below RAM)")
    p.add_argument("--out", default=None, help="Markdown report (default docs/benchmarks.md, "
                   "none with --quick)")
    p.add_argument("--json", default=None, help="also write all raw results here")
    p.add_argument("--fresh-malloc", action="store_true",
                   help="leave glibc malloc at its fresh-process thresholds "
                        "(see MALLOC_STEADY_STATE)")
    p.add_argument("--no-torch-ops", action="store_true", help="skip torch_ops_vs_eager.py")
    a = p.parse_args()
    if a.n is None:
        a.n = QUICK_N if a.quick else FULL_N
    a.n = sorted(set(a.n))
    if a.out is None and not a.quick:
        a.out = str(REPO / "docs" / "benchmarks.md")
    a.budget_mib = a.budget_gib * GIB
    a.env = child_env(a.threads, malloc_tuning=not a.fresh_malloc)
    a.causal_values = {"both": [False, True], "yes": [True], "no": [False]}[a.causal]
    return a


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    args = parse_args()
    binary = Path(args.build) / "attnkit_bench_attention"
    if not binary.exists():
        sys.exit(f"compare.py: {binary} not found; build it first "
                 f"(cmake --build {args.build} --target attnkit_bench_attention)")
    started = time.monotonic()
    args.start_load = os.getloadavg()[0]
    if args.start_load > 0.5:
        log(f"warning: load average {args.start_load:.2f} before the run; other work on the "
            f"{os.cpu_count()} cores will distort the timings")

    records, status = run_process([args.python, str(MACHINE_REFERENCE), "--threads",
                                   str(args.threads)], args.env, 120, args.budget_mib)
    reference = records[-1] if records else None
    log(f"sgemm 2048³: {reference['median_gflops']:.1f} GFLOP/s" if reference
        else f"machine reference: {status}")

    args.checks = check_peers(args, args.kinds, args.causal_values)
    history, baseline_mib, rows = History(), {}, []
    for kind in args.kinds:
        for mode in args.modes:
            for causal in args.causal_values:
                for n in args.n:
                    row = {"kind": kind, "n": n, "mode": mode, "causal": causal,
                           "flops": attention_flops(kind, n, mode, causal, args.batch,
                                                    args.heads, args.dim),
                           "results": {}, "status": {}}
                    for impl in KIND_IMPLS[kind]:
                        if not impl_supports(impl, kind, causal):
                            continue
                        result, status = run_case(impl, args, history, kind, n, mode, causal,
                                                  baseline_mib)
                        row["results"][impl], row["status"][impl] = result, status
                        log(f"{kind:9s} n={n:<5d} {mode:6s} causal={int(causal)} {impl:17s} " +
                            (f"{result['median_ms']:10.2f} ms  extra "
                             f"{result['extra_peak_mib']:8.1f} MiB  ({result['runs']} runs)"
                             if result else status))
                    rows.append(row)
    rows.sort(key=lambda r: (KINDS.index(r["kind"]), r["n"], MODES.index(r["mode"]), r["causal"]))
    growth = {} if args.no_growth else growth_cases(args, rows)
    train = {} if args.no_train_target else train_target_case(args)

    torch_ops_records = []
    if not args.no_torch_ops:
        ops_n = [n for n in args.n if n <= 4096][-2:]
        cmd = [args.python, str(TORCH_OPS), "--lib", str(Path(args.build) / "libattnkit_ops.so"),
               "--threads", str(args.threads), "--json", "--n", *map(str, ops_n),
               "--kinds", *args.kinds, "--modes", *args.modes, "--causal", args.causal]
        log("torch.ops vs eager: " + " ".join(cmd[1:]))
        torch_ops_records, status = run_process(cmd, args.env, 15 * 60, args.budget_mib)
        if status != "ok":
            log(f"torch_ops_vs_eager.py: {status}")

    sgemm_gflops = reference["median_gflops"] if reference else None
    targets = evaluate_targets(rows, sgemm_gflops, growth, train)
    elapsed = time.monotonic() - started
    print(results_table(rows, sgemm_gflops))
    print()
    print(checks_markdown(args.checks))
    print()
    print(f"growth t({GROWTH_LARGE})/t({GROWTH_SMALL}):\n" + growth_markdown(growth))
    print()
    if reference:
        print(f"sgemm (torch.mm 2048³, {args.threads} threads): {sgemm_gflops:.1f} GFLOP/s")
    print("\nTargets:\n" + targets_markdown(targets))
    if torch_ops_records:
        print("\ntorch.ops.attnkit vs eager:\n" + torch_ops_markdown(torch_ops_records, rows))
    print(f"\nwhole run: {elapsed / 60:.1f} min")
    if args.out:
        write_report(args.out, args, rows, reference, targets, torch_ops_records, elapsed, growth)
        print(f"report written to {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "reference": reference, "rows": rows, "torch_ops": torch_ops_records,
            "growth": [list(k) + [v] for k, v in growth.items()], "train": train,
            "checks": [list(k) + list(v) for k, v in args.checks.items()]}, indent=1))


if __name__ == "__main__":
    main()
