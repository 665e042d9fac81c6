#!/usr/bin/env python3
"""Per-token overhead of decoding: greedy ms/token of a tiny GPT-2-shaped model (2 layers, hidden
128, 2 heads, vocabulary 1000: the weights are 0.6 MB, so a step is almost all overhead) in
attnkit and in CTranslate2, on the same weights (bench/decode_ct2.py prepares them with a fixed
seed), after checking that both generate the same ids.

Run with the python of scripts/decode_bench_venv.sh (CTranslate2):
  PY=$(bash scripts/decode_bench_venv.sh)
  $PY bench/decode_overhead.py --build build [--baseline BUILD2] [--threads 1] [--repeats 5]

Three numbers per build, each the best of --repeats fresh processes:
  in-process   attnkit_bench_decode --mode greedy: decode::generate timed inside the process
               (--new-tokens tokens after a 16-token prompt), ms per generated token;
  CLI          `attnkit generate --prompt-ids ... --no-eos`: (wall(N) − wall(16)) / (N − 16), the
               per-token cost a user of the command sees (load and prompt cancel out);
  CTranslate2  ctranslate2.Generator.generate_batch timed inside the process (float32).
--baseline BUILD2 measures a second build the same way in the same run (e.g. the commit before a
change, built in a worktree), alternating the two builds' processes."""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = [880, 373, 500, 41, 167, 77, 324, 498, 294, 309, 427, 248, 137, 61, 319, 18]
SHAPE = ["--layers", "2", "--hidden", "128", "--heads", "2", "--vocab", "1000"]


def run(argv, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"decode_overhead: {' '.join(argv)} failed:\n{p.stderr}")
    return p.stdout


def json_line(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")][0]


def thread_env(threads):
    env = dict(os.environ)
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    return env


def in_process(build, model, a):
    out = json_line(run([os.path.join(build, "attnkit_bench_decode"), "--mode", "greedy",
                         "--kind", "softmax", *SHAPE, "--model", os.path.join(model, "hf"),
                         "--prompt", ",".join(map(str, PROMPT)), "--new-tokens",
                         str(a.new_tokens), "--threads", str(a.threads)], thread_env(a.threads)))
    return 1e3 / out["tokens_per_s"], out["ids"]


def cli_wall(build, model, a, new_tokens):
    argv = [os.path.join(build, "attnkit"), "--threads", str(a.threads), "--quiet", "generate",
            "--model", os.path.join(model, "hf"), "--prompt-ids", " ".join(map(str, PROMPT)),
            "--max-new-tokens", str(new_tokens), "--no-eos", "--json"]
    t0 = time.perf_counter()
    out = run(argv, thread_env(a.threads))
    elapsed = time.perf_counter() - t0
    return elapsed, json.loads(out)["results"][0]["sequences"][0]["ids"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--baseline", default="", help="a second build directory, measured alike")
    parser.add_argument("--model-dir", default="~/.cache/attnkit/bench/decode-overhead")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    a = parser.parse_args()
    model = os.path.expanduser(a.model_dir)
    run([sys.executable, os.path.join(HERE, "decode_ct2.py"), "prepare", model, *SHAPE,
         "--positions", str(len(PROMPT) + a.new_tokens + 8)])
    builds = [("attnkit", a.build)] + ([("baseline", a.baseline)] if a.baseline else [])
    best = {name: {"in_process": 1e9, "cli_short": 1e9, "cli_long": 1e9} for name, _ in builds}
    best["ct2"] = 1e9
    ids = {}
    for _ in range(a.repeats):
        for name, build in builds:
            ms, got = in_process(build, model, a)
            best[name]["in_process"] = min(best[name]["in_process"], ms)
            ids[name + " in-process"] = got
            short, _ = cli_wall(build, model, a, 16)
            long, got = cli_wall(build, model, a, a.new_tokens)
            best[name]["cli_short"] = min(best[name]["cli_short"], short)
            best[name]["cli_long"] = min(best[name]["cli_long"], long)
            ids[name + " CLI"] = got
        ct2 = json_line(run([sys.executable, os.path.join(HERE, "decode_ct2.py"), "generate", model,
                             *SHAPE, "--prompt", ",".join(map(str, PROMPT)), "--new-tokens",
                             str(a.new_tokens), "--threads", str(a.threads)]))
        best["ct2"] = min(best["ct2"], 1e3 / ct2["tokens_per_s"])
        ids["CTranslate2"] = ct2["ids"]
    reference = ids["CTranslate2"]
    for name, got in ids.items():
        if got != reference:
            sys.exit(f"decode_overhead: {name} generated other ids than CTranslate2; no timings")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    print(f"== per-token overhead: greedy, GPT-2 shape 2 layers x 128 wide, 2 heads, vocabulary "
          f"1000, {len(PROMPT)}-token prompt, {a.new_tokens} new tokens, batch 1, {a.threads} "
          f"thread(s), best of {a.repeats}; {cpu}; load {os.getloadavg()[0]:.2f} ==")
    print("ids: equal in every run (attnkit in-process and CLI, CTranslate2)")
    print("| implementation | in-process ms/token | CLI ms/token |")
    print("|---|---|---|")
    for name, build in builds:
        b = best[name]
        cli = (b["cli_long"] - b["cli_short"]) / (a.new_tokens - 16) * 1e3
        print(f"| {name} ({build}) | {b['in_process']:.3f} | {cli:.3f} |")
    print(f"| CTranslate2 (float32) | {best['ct2']:.3f} | |")


if __name__ == "__main__":
    main()
