#!/usr/bin/python3
"""attnkit vs PyTorch eager: attention speed and peak memory, one fresh process per case.

    /usr/bin/python3 bench/compare.py [--build build] [--quick] [--out docs/benchmarks.md] ...

For every kind {softmax, linear, cosformer} × n × {fwd, fwdbwd} × {non-causal, causal} it runs
build/attnkit_bench_attention and bench/peers/attention_peer.py (same CLI, same JSON line) with
the same shapes and threads, then prints a table (speed-up, extra peak memory, memory ratio,
achieved GFLOP/s next to a measured sgemm GFLOP/s), evaluates the performance targets and writes
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

REPO = Path(__file__).resolve().parent.parent
PEER = REPO / "bench" / "peers" / "attention_peer.py"
MACHINE_REFERENCE = REPO / "bench" / "peers" / "machine_reference.py"
TORCH_OPS = REPO / "bench" / "torch_ops_vs_eager.py"

KINDS = ["softmax", "linear", "cosformer"]
MODES = ["fwd", "fwdbwd"]
FULL_N = [256, 1024, 4096, 16384]
QUICK_N = [256, 1024]
IMPLS = ["attnkit", "peer"]
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

def case_command(impl, args, kind, n, mode, causal):
    if impl == "attnkit":
        cmd = [str(Path(args.build) / "attnkit_bench_attention")]
    else:
        cmd = [args.python, str(PEER)]
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


def run_case(impl, args, history, kind, n, mode, causal, baseline_mib):
    key = (impl, kind, mode, causal)
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


def row_values(row, sgemm_gflops):
    a, p = row["attnkit"], row["peer"]
    a_ms = a["median_ms"] if a else None
    p_ms = p["median_ms"] if p else None
    a_mib = a["extra_peak_mib"] if a else None
    p_mib = p["extra_peak_mib"] if p else None
    gflops = row["flops"] / (a_ms / 1e3) / 1e9 if a_ms else None
    return {
        "attnkit_ms": a_ms, "peer_ms": p_ms,
        "speedup": p_ms / a_ms if a_ms and p_ms else None,
        "attnkit_mib": a_mib, "peer_mib": p_mib,
        # attnkit extra peak as a fraction of the peer's; undefined when the peer needs ~nothing.
        "memory_ratio": a_mib / p_mib if a_mib is not None and p_mib and p_mib >= 1.0 else None,
        "gflops": gflops,
        "sgemm_fraction": gflops / sgemm_gflops if gflops and sgemm_gflops else None,
    }


def results_table(rows, sgemm_gflops):
    header = ["kind", "n", "mode", "causal", "attnkit ms", "peer ms", "speed-up",
              "attnkit extra peak MiB", "peer extra peak MiB", "memory ratio",
              "attnkit GFLOP/s", "% of sgemm"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        v = row_values(row, sgemm_gflops)
        peer_ms = fmt_ms(v["peer_ms"]) if row["peer"] else row["peer_status"]
        attnkit_ms = fmt_ms(v["attnkit_ms"]) if row["attnkit"] else row["attnkit_status"]
        cells = [row["kind"], str(row["n"]), row["mode"], "yes" if row["causal"] else "no",
                 attnkit_ms, peer_ms,
                 f"{v['speedup']:.1f}×" if v["speedup"] else "—",
                 fmt_mib(v["attnkit_mib"]), fmt_mib(v["peer_mib"]),
                 f"{100 * v['memory_ratio']:.1f}%" if v["memory_ratio"] is not None else "—",
                 f"{v['gflops']:.1f}" if v["gflops"] else "—",
                 f"{100 * v['sgemm_fraction']:.0f}%" if v["sgemm_fraction"] else "—"]
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


def evaluate_targets(rows, sgemm_gflops):
    def values(kind, n, mode, causal):
        row = find(rows, kind, n, mode, causal)
        return (row_values(row, sgemm_gflops) if row else {}), row

    def speed_and_memory(kind, speedup_min, ratio_max):
        v, _ = values(kind, 4096, "fwdbwd", True)
        s, r = v.get("speedup"), v.get("memory_ratio")
        return [
            check(f"{kind} causal fwd+bwd n=4096 speed-up ≥ {speedup_min:g}×",
                  f"{s:.1f}×" if s else "not measured", s >= speedup_min if s else None),
            check(f"{kind} causal fwd+bwd n=4096 extra peak ≤ {100 * ratio_max:g}% of the peer's",
                  f"{100 * r:.1f}% ({v['attnkit_mib']:.0f} vs {v['peer_mib']:.0f} MiB)"
                  if r is not None else "not measured", r <= ratio_max if r is not None else None),
        ]

    targets = []
    targets.append(("Causal linear and causal cosFormer fwd+bwd at n=4096: ≥ 100× faster than the "
                    "peer, extra peak memory ≤ 5% of the peer's",
                    speed_and_memory("linear", 100, 0.05)
                    + speed_and_memory("cosformer", 100, 0.05)))

    softmax_checks = speed_and_memory("softmax", 4, 0.25)
    for causal in (False, True):
        v, _ = values("softmax", 4096, "fwd", causal)
        f = v.get("sgemm_fraction")
        softmax_checks.append(check(
            f"softmax {'causal' if causal else 'non-causal'} fwd n=4096 ≥ 60% of sgemm FLOP/s",
            f"{100 * f:.0f}% ({v['gflops']:.0f} of {sgemm_gflops:.0f} GFLOP/s)" if f
            else "not measured", f >= 0.6 if f else None))
    targets.append(("Softmax causal fwd+bwd at n=4096: ≥ 4× faster, extra peak memory ≤ 25% of the "
                    "peer's; softmax forward ≥ 60% of the measured sgemm FLOP/s", softmax_checks))

    big_checks = []
    for causal in (False, True):
        _, row = values("softmax", 16384, "fwdbwd", causal)
        a = row["attnkit"] if row else None
        if a:
            value, ok = (f"{a['peak_rss_mib']:.0f} MiB peak ({a['extra_peak_mib']:.0f} MiB extra)",
                         a["peak_rss_mib"] <= 1024)
        elif row:  # not run: over the memory budget (≥ 1 GiB) by estimate or watchdog -> not met
            status = row["attnkit_status"]
            value, ok = status, (False if status.startswith(("skipped (est.", "killed")) else None)
        else:
            value, ok = "not measured", None
        big_checks.append(check(
            f"softmax {'causal' if causal else 'non-causal'} fwd+bwd n=16384 peak RSS ≤ 1 GiB",
            value, ok))
    targets.append(("Softmax fwd+bwd at n=16384 runs within 1 GiB peak (whole process)",
                    big_checks))

    linear_checks = []
    for kind in ("linear", "cosformer"):
        for mode in MODES:
            for causal in (False, True):
                _, small = values(kind, 1024, mode, causal)
                _, large = values(kind, 4096, mode, causal)
                measured = small and large and small["attnkit"] and large["attnkit"]
                ratio = (large["attnkit"]["median_ms"] / small["attnkit"]["median_ms"]
                         if measured else None)
                linear_checks.append(check(
                    f"{kind} {mode} {'causal' if causal else 'non-causal'}: t(4096)/t(1024) ≤ 4.5",
                    f"{ratio:.2f}" if ratio else "not measured",
                    ratio <= 4.5 if ratio else None))
    targets.append(("Linear/cosFormer time grows linearly in n (attnkit, 4096 vs 1024 within 4.5×)",
                    linear_checks))
    return targets


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
        cpp = row["attnkit"]["median_ms"] if row and row["attnkit"] else None
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
        f"PyTorch/LibTorch {torch_version(args)}.",
        f"Shapes: batch {args.batch}, heads {args.heads}, head dim {args.dim}, float32, "
        f"n ∈ {{{', '.join(map(str, args.n))}}}; fwd and fwd+bwd; causal and non-causal.",
        f"attnkit: `{Path(args.build).name}/attnkit_bench_attention` (C++ `attnkit::ops::*`). "
        "Peer: `bench/peers/attention_peer.py`, the formulas in plain PyTorch eager (softmax with "
        "an explicit n×n matrix and -inf causal mask; linear/cosFormer causal via cumsum of φk⊗v).",
        f"One fresh process per case. Time: median of the samples (at least {args.repeat} samples "
        f"and {args.min_time:g} s, no new sample past {args.max_time:g} s; a first call slower "
        f"than {args.max_time / 2:g} s is the only sample). fwd: inputs without grad; fwd+bwd: "
        "`out.backward(grad)` with grads of q, k, v.",
        "Extra peak memory: `getrusage` ru_maxrss at the end minus the resident set before the "
        "first call (inputs already allocated). Memory ratio: attnkit's extra peak as a "
        "percentage of the peer's.",
        f"Malloc: {malloc}.",
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


def write_report(path, args, rows, reference, targets, torch_ops_records, elapsed_s):
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

## Targets

Evaluated from the table above by `bench/compare.py`.

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
/usr/bin/python3 bench/compare.py --help  # --kinds, --n, --modes, --causal, budgets, --json
```
"""
    Path(path).write_text(text)


_TORCH_VERSION = None


def torch_version(args):
    global _TORCH_VERSION
    if _TORCH_VERSION is None:
        out = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True)
        _TORCH_VERSION = out.stdout.strip() or "unknown"
    return _TORCH_VERSION


# --------------------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--build", default=str(REPO / "build"), help="build dir with the binaries")
    p.add_argument("--python", default="/usr/bin/python3", help="peer interpreter")
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

    causal_values = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    history, baseline_mib, rows = History(), {}, []
    for kind in args.kinds:
        for mode in args.modes:
            for causal in causal_values:
                for n in args.n:
                    row = {"kind": kind, "n": n, "mode": mode, "causal": causal,
                           "flops": attention_flops(kind, n, mode, causal, args.batch,
                                                    args.heads, args.dim)}
                    for impl in IMPLS:
                        result, status = run_case(impl, args, history, kind, n, mode, causal,
                                                  baseline_mib)
                        row[impl], row[impl + "_status"] = result, status
                        log(f"{kind:9s} n={n:<5d} {mode:6s} causal={int(causal)} {impl:7s} " +
                            (f"{result['median_ms']:10.2f} ms  extra "
                             f"{result['extra_peak_mib']:8.1f} MiB  ({result['runs']} runs)"
                             if result else status))
                    rows.append(row)
    rows.sort(key=lambda r: (KINDS.index(r["kind"]), r["n"], MODES.index(r["mode"]), r["causal"]))

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
    targets = evaluate_targets(rows, sgemm_gflops)
    elapsed = time.monotonic() - started
    print(results_table(rows, sgemm_gflops))
    print()
    if reference:
        print(f"sgemm (torch.mm 2048³, {args.threads} threads): {sgemm_gflops:.1f} GFLOP/s")
    print("\nTargets:\n" + targets_markdown(targets))
    if torch_ops_records:
        print("\ntorch.ops.attnkit vs eager:\n" + torch_ops_markdown(torch_ops_records, rows))
    print(f"\nwhole run: {elapsed / 60:.1f} min")
    if args.out:
        write_report(args.out, args, rows, reference, targets, torch_ops_records, elapsed)
        print(f"report written to {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps({"reference": reference, "rows": rows,
                                               "torch_ops": torch_ops_records}, indent=1))


if __name__ == "__main__":
    main()
