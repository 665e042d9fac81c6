#!/usr/bin/python3
"""MLM training-step benchmark (issue 32; part of `make bench`): one masked-LM training step
(forward, backward, AdamW) of a BERT-base-shaped model (12 layers, hidden 768, 12 heads,
intermediate 3072, vocab 30522), batch 8, n = 128 and 512 (cosFormer also 2048):
attnkit_bench_train --model mlm (softmax, cosFormer) vs transformers' BertForMaskedLM on PyTorch
2.x with attn_implementation "sdpa" (bench/peers/mlm_peer.py, in the Python package venv of
scripts/python_package_venv.sh). One fresh process per case, the same threads on both sides, the
peer given attnkit's process set-up (thread-pool waits of bench/thread_wait.py and its malloc
settings). Full runs replace their own section of docs/training-benchmarks.md (between the
markers below); --quick runs tiny shapes, one step, and writes nothing.

    /usr/bin/python3 bench/mlm_compare.py --build BUILD --peer-python VENV_PYTHON [--quick] [--threads 2]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

from thread_wait import THREAD_WAIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "training-benchmarks.md")
BEGIN = "<!-- mlm-step-benchmark: begin (bench/mlm_compare.py writes this section) -->"
END = "<!-- mlm-step-benchmark: end -->"
# attnkit::reuse_freed_memory()'s glibc settings (as bench/train_compare.py gives its peer).
REUSE_MALLOC = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
BERT_BASE = {"hidden": 768, "layers": 12, "heads": 12, "intermediate": 3072, "vocab": 30522}
TINY = {"hidden": 64, "layers": 2, "heads": 4, "intermediate": 128, "vocab": 1000}


def run(cmd, timeout, threads, extra_env=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), **(extra_env or {}))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    if p.returncode < 0:  # e.g. SIGKILL from the kernel's OOM killer: nothing on stderr
        return {"error": f"killed by signal {-p.returncode}" + (" (out of memory?)" if p.returncode == -9 else "")}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def shape_args(shape, n, batch, steps, warmup, threads):
    args = ["--n", str(n), "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
            "--threads", str(threads)]
    for key, value in shape.items():
        args += ["--" + key, str(value)]
    return args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--peer-python", default=os.path.expanduser("~/.cache/attnkit/venv-py/bin/python"),
                    help="a python with torch 2.x and transformers (scripts/python_package_venv.sh prints it)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, one step: checks it runs; writes nothing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    a, _ = ap.parse_known_args()  # bench/run.sh passes compare.py's options along too
    started = time.time()
    shape = TINY if a.quick else BERT_BASE
    batch = 2 if a.quick else 8
    steps, warmup = (1, 1) if a.quick else (3, 1)
    # (n, attnkit kinds); the peer (softmax, sdpa) runs at every n.
    plan = ([(16, ("softmax", "cosformer")), (32, ("softmax", "cosformer")), (64, ("cosformer",))] if a.quick else
            [(128, ("softmax", "cosformer")), (512, ("softmax", "cosformer")), (2048, ("cosformer",))])
    timeout = 300 if a.quick else 3600
    bench = os.path.join(a.build, "attnkit_bench_train")
    peer_env = {"GLIBC_TUNABLES": REUSE_MALLOC, **THREAD_WAIT}
    lines = []
    out = lambda s="": (print(s, flush=True), lines.append(s))  # noqa: E731
    dims = ", ".join(f"{k} {v}" for k, v in shape.items())
    out(f"### MLM training step: BERT-base shape ({dims}), batch {batch}, {a.threads} threads")
    out()
    out("| n | attnkit kind | attnkit tokens/s (head on the selected) | attnkit tokens/s (head on all, as "
        "BertForMaskedLM) | BertForMaskedLM sdpa tokens/s | speed-up | speed-up, head on all | "
        "attnkit extra peak MiB | peer extra peak MiB |")
    out("|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    peer_version = None
    parameters = {}  # n -> {(impl, count)}: the position table grows with n, so compare within one n
    for n, kinds in plan:
        args = shape_args(shape, n, batch, steps, warmup, a.threads)
        peer = run([a.peer_python, os.path.join(ROOT, "bench", "peers", "mlm_peer.py"), *args], timeout, a.threads,
                   peer_env)
        if "error" not in peer:
            peer_version = f"torch {peer['torch']}, transformers {peer['transformers']}"
        for kind in kinds:
            ours = run([bench, "--model", "mlm", "--kind", kind, *args], timeout, a.threads)
            ours_all = run([bench, "--model", "mlm", "--mlm-head", "all", "--kind", kind, *args], timeout, a.threads)
            t = [None if "error" in r else r["tokens_per_s"] for r in (ours, ours_all, peer)]
            cell = lambda r, v: r["error"] if "error" in r else f"{v:,.0f}"  # noqa: E731
            ratio = lambda x, y: f"{x / y:.2f}×" if x and y else "—"  # noqa: E731
            mem = lambda r: "—" if "error" in r else f"{r['extra_peak_mib']:,.0f}"  # noqa: E731
            out(f"| {n} | {kind} | {cell(ours, t[0])} | {cell(ours_all, t[1])} | {cell(peer, t[2])} | "
                f"{ratio(t[0], t[2])} | {ratio(t[1], t[2])} | {mem(ours)} | {mem(peer)} |")
            if t[0] and t[2]:
                ratios[(kind, n)] = t[0] / t[2]
            parameters.setdefault(n, set()).update((r["impl"], r["parameters"]) for r in (ours, peer)
                                                   if "parameters" in r)
    out()
    out("Parameters: " + "; ".join(
        f"n = {n}: " + ", ".join(f"{impl} {count:,}" for impl, count in sorted(found))
        + ("" if len({c for _, c in found}) <= 1 else " — the models DIFFER") for n, found in parameters.items()))
    out()
    out("Speed-up = attnkit tokens/s over BertForMaskedLM's. attnkit's first column runs the masked-LM head on "
        "the selected 15% of positions only, as `attnkit train --task.name mlm` does; the second runs it on "
        "every position, as BertForMaskedLM does (like for like).")
    out()
    out("Targets (issue 32)" + (" — quick run, tiny shapes: the verdicts below say nothing" if a.quick else "") + ":")
    out()
    big = 512 if not a.quick else 32
    if ("softmax", big) in ratios:
        r = ratios[("softmax", big)]
        out(f"- softmax at n = {big}: {r:.2f}× (target ≥ 1.5×) — " + ("met" if r >= 1.5 else "NOT met"))
    cos = [(n, ratios[("cosformer", n)]) for n, _ in plan if ("cosformer", n) in ratios]
    if len(cos) >= 2:
        growing = all(x[1] < y[1] for x, y in zip(cos, cos[1:]))
        out("- cosFormer's advantage growing with n: " + ", ".join(f"n = {n}: {r:.2f}×" for n, r in cos) + " — "
            + ("met" if growing else "NOT met"))
    out()
    minutes = (time.time() - started) / 60
    print(f"mlm_compare: {minutes:.1f} min")
    if a.quick or a.no_write:
        return 0
    section = [BEGIN, "## MLM training step (issue 32)", "",
               f"Generated by `make bench` (`bench/mlm_compare.py`) on {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC "
               f"in {minutes:.1f} min; {os.cpu_count()} CPU(s), load average (1 min) at the end "
               f"{os.getloadavg()[0]:.2f}. attnkit: `attnkit_bench_train --model mlm` (LibTorch 1.13); peer: "
               f"`bench/peers/mlm_peer.py` ({peer_version or 'did not run'}). One step = forward, masked-LM cross "
               f"entropy over a fixed 15% of positions, backward, AdamW; {steps} timed steps after {warmup} "
               "untimed; random ids, no padding, dropout 0, float32. `OMP_NUM_THREADS` = `OPENBLAS_NUM_THREADS` = "
               f"{a.threads} on both sides; the peer gets attnkit's process set-up (`GLIBC_TUNABLES={REUSE_MALLOC}` "
               + " ".join(f"`{k}={v}`" for k, v in THREAD_WAIT.items()) + ").", ""] + lines + [END]
    write_section(section)
    return 0


def write_section(section, path=DOC):
    """Puts `section` (lines, starting with BEGIN and ending with END) in place of the file's
    section between the markers, or at its end when it has none; the rest stays as it is."""
    text = open(path).read() if os.path.exists(path) else "# attnkit training benchmarks\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + "\n".join(section) + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(section) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
