#!/usr/bin/env python3
"""attnkit's float32 GEMM library, oneDNN against the BLAS, on the same binary (ATTNKIT_GEMM=onednn
| blas: src/ops/cpu/blas.h): the fused attention kernels' tiles, a training step, and the 2,048-token
prefill of SmolLM2-135M. Rounds alternate the two libraries; each cell reports the best of its
rounds and the blas / onednn ratio of every round (> 1: oneDNN faster). On a CPU with AVX-512 every
cell runs again held to AVX2 (attnkit's kernels by ATTNKIT_KERNEL_ISA, which holds oneDNN to AVX2
too; ATen by ATEN_CPU_CAPABILITY; OpenBLAS picks its Haswell kernels either way here), as an
AVX2-only machine would run it. Writes docs/gemm-library.json and its region of docs/benchmarks.md.

Usage: bench/gemm_library.py --build build [--rounds 5] [--quick] [--no-prefill] [--no-avx2]
       bench/gemm_library.py --report-only
"""
import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_process import load_averages, machine_isa, run_json, thread_env  # noqa: E402
from gnu_time import render_from_json, replace_region, write_json  # noqa: E402

BEGIN, END = "<!-- gemm-library:begin -->", "<!-- gemm-library:end -->"
JSON = os.path.join(ROOT, "docs", "gemm-library.json")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
LIBRARIES = ("blas", "onednn")
GGUF = os.path.expanduser("~/.cache/attnkit/weights/smollm2-135m-instruct.gguf")
FORTUNES = "/usr/share/games/fortunes/fortunes"
PROMPTS = os.path.join("/tmp", f"gemm-library-prompt-{os.getpid()}.txt")  # the prefill's text
ISA_ENV = {"native": {}, "avx2": {"ATTNKIT_KERNEL_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
                                  "OPENBLAS_CORETYPE": "Haswell"}}


def cells(quick, prefill):
    """(name, threads, argv-maker, seconds-from-JSON): every cell of the table."""
    out = []
    n = 1024 if quick else 2048
    for kind, mode in (("softmax", "fwd"), ("softmax", "fwdbwd"), ("linear", "fwdbwd"), ("cosformer", "fwdbwd")):
        out.append((f"{kind} {mode}, causal, n = {n}, 8 heads x 64", 1,
                    lambda b, kind=kind, mode=mode: [os.path.join(b, "attnkit_bench_attention"), "--kind", kind,
                                                     "--mode", mode, "--causal", "--n", str(n), "--heads", "8",
                                                     "--dim", "64", "--batch", "1", "--threads", "1",
                                                     "--repeat", "3", "--max-time", "20"],
                    lambda r: r["best_ms"] / 1000))
    for threads in (1, 2):
        out.append((f"training step, GPT-2 shape (4 layers, hidden 256, n 256, batch 8, vocab 8192)", threads,
                    lambda b, t=threads: [os.path.join(b, "attnkit_bench_train"), "--model", "causal-lm",
                                          "--steps", "3" if quick else "5", "--threads", str(t)],
                    lambda r: r["step_ms"] / 1000))
    if prefill:
        for threads in (1, 2):
            out.append((f"prefill, SmolLM2-135M, {512 if quick else 2048} tokens", threads,
                        lambda b, t=threads: [os.path.join(b, "attnkit"), "--threads", str(t), "generate", "--model",
                                              GGUF, "--prompts", PROMPTS, "--max-input-length",
                                              str(512 if quick else 2048), "--max-new-tokens", "1", "--json"],
                        lambda r: r["timing"]["prefill_s"]))
    return out



def write_prompt():
    """One line of Debian's fortunes, long enough for 2,048 tokens."""
    with open(FORTUNES) as f:
        text = " ".join(f.read()[:40000].split())
    with open(PROMPTS, "w") as f:
        f.write(text + "\n")


def run(a):
    prefill = not a.no_prefill and os.path.exists(GGUF)
    if prefill:
        write_prompt()
    rows = []
    start = load_averages()
    with open("/proc/cpuinfo") as f:
        avx512 = " avx512f " in f.read().replace("\n", " ")
    isas = ["native"] + (["avx2"] if avx512 and not a.no_avx2 else [])
    for isa, (name, threads, argv, seconds) in [(i, c) for i in isas for c in cells(a.quick, prefill)]:
        times = {lib: [] for lib in LIBRARIES}
        error = None
        for r in range(a.rounds):
            order = LIBRARIES if r % 2 == 0 else LIBRARIES[::-1]
            for lib in order:
                result = run_json(argv(a.build), 600, thread_env(threads, dict(ISA_ENV[isa], ATTNKIT_GEMM=lib)))
                if "error" in result:
                    error = f"{lib}: {result['error']}"
                    break
                times[lib].append(seconds(result))
            if error:
                break
        row = {"case": name, "isa": isa, "threads": threads, "blas_rounds": times["blas"], "onednn_rounds": times["onednn"]}
        if error:
            row["error"] = error
        print(f"progress: {json.dumps(row)}", file=sys.stderr, flush=True)
        rows.append(row)
    if prefill:
        os.remove(PROMPTS)
    return {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_isa(),
            "load_start": start, "load_end": load_averages(), "rounds": a.rounds, "quick": a.quick, "rows": rows}


def markdown(r):
    lines = [BEGIN, "",
             f"Run {r['date']} by `bench/gemm_library.py`{' --quick' if r['quick'] else ''}. Machine: {r['machine']}; "
             f"load average {r['load_start']} at the start, {r['load_end']} at the end. The same binary with "
             f"`ATTNKIT_GEMM=blas` (Debian's OpenBLAS 0.3.21, through libblas.so.3) and `ATTNKIT_GEMM=onednn` "
             f"(Debian's oneDNN 2.6.3), {r['rounds']} alternating rounds; seconds are the best round of each "
             "(the kernels: best of their own samples; the training step: mean of its timed steps; the "
             "prefill: `generate --json`'s `prefill_s`).", "",
             "", "Kernels: `native` is the CPU's best copy (oneDNN's too); `avx2` holds attnkit's kernels, "
             "oneDNN (through `ATTNKIT_KERNEL_ISA=avx2`) and ATen (`ATEN_CPU_CAPABILITY=avx2`) to AVX2.", "",
             "| case | kernels | threads | BLAS s | oneDNN s | BLAS / oneDNN (best) | per round |",
             "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        if "error" in row or not row["blas_rounds"]:
            lines.append(f"| {row['case']} | {row.get('isa', 'native')} | {row['threads']} | — | — | failed: {row.get('error', 'no rounds')} | |")
            continue
        b, o = min(row["blas_rounds"]), min(row["onednn_rounds"])
        per = [x / y for x, y in zip(row["blas_rounds"], row["onednn_rounds"])]
        lines.append(f"| {row['case']} | {row.get('isa', 'native')} | {row['threads']} | {b:.4g} | {o:.4g} | {b / o:.2f}x | "
                     f"{min(per):.2f}x-{max(per):.2f}x |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="n = 1024 kernels, 512-token prefill, 3 training steps")
    p.add_argument("--no-prefill", action="store_true")
    p.add_argument("--no-avx2", action="store_true", help="skip the cells held to AVX2")
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args()
    if a.report_only:
        render_from_json(JSON, DOC, BEGIN, END, markdown, "gemm_library")
        return
    if a.rounds < 1:
        sys.exit("gemm_library: --rounds must be at least 1")
    result = run(a)
    write_json(JSON, result)
    replace_region(DOC, BEGIN, END, markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
