#!/usr/bin/python3
"""make bench, decoding part: per-token latency of a GPT-2-small-shaped model (12 layers, 768
hidden, random weights, batch 1, 2 threads) at positions 256, 1024, 4096 for the softmax KV cache
and the linear / cosFormer RNN state, and greedy tokens/s against the python3-torch eager KV-cache
loop (bench/decode_peer.py) and CTranslate2 (bench/decode_ct2.py, with --ct2-python), all three on
the same random GPT-2 weights after a check that they generate the same ids, next to the memory
bandwidth floor (weight bytes per token / measured read bandwidth). Prints tables and the issue's
targets as PASS/MISS.
--quick: smaller positions and model (a smoke run, no targets)."""
import argparse
import json
import os
import subprocess
import sys

from bench_process import load_averages
from thread_wait import with_thread_wait

HERE = os.path.dirname(os.path.abspath(__file__))


# The prompt every implementation gets (16 ids below the smallest benchmark vocabulary, 1000).
PROMPT = [880, 373, 500, 41, 167, 77, 324, 498, 294, 309, 427, 248, 137, 61, 319, 18]
THREADS = 0  # set from --threads in main()


def run_json(argv, parse=True, thread_wait=False):
    # Every process gets the benchmark's thread count in its BLAS and OpenMP pools too (the eager
    # loop's OpenBLAS pool ignores torch.set_num_threads). attnkit's executables add their
    # thread-wait settings themselves (src/process_start.cpp); thread_wait=True gives a peer the
    # same ones (the like-for-like row), otherwise a peer runs as its users run it.
    env = dict(os.environ)
    if thread_wait:
        with_thread_wait(env)
    if THREADS:
        env.update(OPENBLAS_NUM_THREADS=str(THREADS), OMP_NUM_THREADS=str(THREADS))
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"decode_compare: {' '.join(argv)} failed:\n{p.stderr}")
    if not parse:
        return []
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def compare_greedy(a, binary, shape):
    """Greedy tokens/s of attnkit, the eager loop and CTranslate2 on the same weights (the model
    bench/decode_ct2.py prepares with a fixed seed), after checking that all three generate the
    same ids with the same summed log-probability. Without the CTranslate2 venv, attnkit and the
    eager loop run their own random weights and CTranslate2 is not measured."""
    new_tokens = "32" if a.quick else "128"
    prompt = ",".join(str(i) for i in PROMPT)
    common = ["--prompt", prompt, "--new-tokens", new_tokens, "--threads", str(a.threads)]
    results, model = {}, None
    if a.ct2_python:
        model = os.path.expanduser(a.model_dir + ("-quick" if a.quick else ""))
        run_json([a.ct2_python, os.path.join(HERE, "decode_ct2.py"), "prepare", model,
                  *shape], parse=False)
    model_args = ["--model", os.path.join(model, "hf")] if model else []
    results["attnkit"] = run_json([binary, "--mode", "greedy", "--kind", "softmax", *shape,
                                   *model_args, *common])[0]
    results["eager"] = run_json(["/usr/bin/python3", os.path.join(HERE, "decode_peer.py"), *shape,
                                 *model_args, *common])[0]
    results["eager_like"] = run_json(["/usr/bin/python3", os.path.join(HERE, "decode_peer.py"), *shape,
                                      *model_args, *common], thread_wait=True)[0]
    if model:
        results["ct2"] = run_json([a.ct2_python, os.path.join(HERE, "decode_ct2.py"), "generate",
                                   model, *shape, *common])[0]
    weight_bytes = results["attnkit"]["weight_bytes"]
    bw = run_json([binary, "--mode", "bandwidth", "--bytes", str(weight_bytes), "--repeats", "10", "--threads",
                   str(a.threads)])[0]
    floor_ms = weight_bytes / (bw["gb_per_s"] * 1e9) * 1e3

    g = results["attnkit"]
    print()
    print(f"== greedy decoding, softmax KV cache, {len(PROMPT)}-token prompt, {g['new_tokens']} "
          f"new tokens, batch 1, {a.threads} threads"
          f"{', same weights (' + model + ')' if model else ', random weights'} ==")
    same = True
    for name in ("eager", "eager_like", "ct2") if model else ():
        if name not in results:
            continue
        r = results[name]
        ids_equal = r["ids"] == g["ids"]
        score_diff = abs(r["score"] - g["score"])
        ok = ids_equal and score_diff <= 1e-3 * max(1.0, abs(g["score"]))
        same = same and ok
        print(f"check {name} vs attnkit: ids {'equal' if ids_equal else 'DIFFER'}, summed "
              f"log-probability {r['score']:.5f} vs {g['score']:.5f} -> {'OK' if ok else 'MISMATCH'}")
    if model and not same:
        sys.exit("decode_compare: the peers did not compute what attnkit computes (see above); "
                 "timings not reported")
    print(f"memory read bandwidth ({a.threads} threads, {weight_bytes / 1e6:.0f} MB buffer): "
          f"{bw['gb_per_s']:.2f} GB/s; one step reads the weights ({weight_bytes / 1e6:.0f} MB, "
          f"LM head included): floor {floor_ms:.1f} ms/token = {1e3 / floor_ms:.1f} tokens/s")
    print("| implementation | tokens/s | ms/token | floor / ms/token |")
    print("|---|---|---|---|")
    names = {"attnkit": "attnkit (decode::generate)", "eager": "python3-torch eager KV loop",
             "eager_like": "python3-torch eager KV loop, attnkit's thread-wait settings",
             "ct2": f"{results['ct2']['peer']} (float32)" if "ct2" in results else ""}
    for name in ("attnkit", "eager", "eager_like", "ct2"):
        if name not in results:
            continue
        ms = 1e3 / results[name]["tokens_per_s"]
        print(f"| {names[name]} | {results[name]['tokens_per_s']:.2f} | {ms:.1f} | "
              f"{floor_ms / ms:.2f} |")
    if "ct2" not in results:
        print("| CTranslate2 | not measured (no venv: scripts/decode_bench_venv.sh failed) | | |")
    print(f"attnkit / eager: {g['tokens_per_s'] / results['eager']['tokens_per_s']:.2f}x"
          f" (like-for-like: {g['tokens_per_s'] / results['eager_like']['tokens_per_s']:.2f}x)"
          + (f", attnkit / CTranslate2: {g['tokens_per_s'] / results['ct2']['tokens_per_s']:.2f}x"
             if "ct2" in results else ""))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ct2-python", default="",
                        help="python of scripts/decode_bench_venv.sh (empty: no CTranslate2)")
    parser.add_argument("--model-dir", default="~/.cache/attnkit/decode-bench-model",
                        help="where the shared random GPT-2 (HF + CTranslate2 layouts) is kept")
    a, _ = parser.parse_known_args()
    global THREADS
    THREADS = a.threads
    print(f"load average (1, 5, 15 min) at the start: {load_averages()}")
    binary = os.path.join(a.build, "attnkit_bench_decode")
    shape = ["--layers", "12", "--hidden", "768", "--heads", "12", "--vocab", "50257"]
    positions = "256,1024,4096"
    if a.quick:
        shape = ["--layers", "2", "--hidden", "128", "--heads", "4", "--vocab", "1000"]
        positions = "64,256"
    threads = ["--threads", str(a.threads)]
    latency = {}
    for kind in ("softmax", "linear:elu", "cosformer"):
        for row in run_json([binary, "--mode", "latency", "--kind", kind, "--positions", positions,
                             "--steps", "16", *shape, *threads]):
            latency[(kind, row["position"])] = row
    pos = [int(p) for p in positions.split(",")]
    print(f"== decoding: per-token latency (ms, median of 16 tokens), GPT-2 shape "
          f"{' '.join(shape)}, batch 1, {a.threads} threads ==")
    print("| kind | state | " + " | ".join(f"t = {p}" for p in pos) + f" | t={pos[-1]} / t={pos[0]} |")
    print("|---|---|" + "---|" * (len(pos) + 1))
    for kind in ("softmax", "linear:elu", "cosformer"):
        cells = [f"{latency[(kind, p)]['ms_per_token']:.2f}" for p in pos]
        ratio = latency[(kind, pos[-1])]["ms_per_token"] / latency[(kind, pos[0])]["ms_per_token"]
        state = latency[(kind, pos[-1])]["state_bytes"] / 2**20
        print(f"| {kind} | {state:.1f} MiB at t={pos[-1]} | " + " | ".join(cells) + f" | {ratio:.2f}x |")

    greedy = compare_greedy(a, binary, shape)
    if a.quick:
        return
    print()
    last, first = pos[-1], pos[0]
    for kind in ("linear:elu", "cosformer"):
        r = latency[(kind, last)]["ms_per_token"] / latency[(kind, first)]["ms_per_token"]
        print(f"target {kind}: t={last} within 1.2x of t={first}: {r:.2f}x "
              f"{'PASS' if r <= 1.2 else 'MISS'}")
        faster = latency[(kind, last)]["ms_per_token"] < latency[("softmax", last)]["ms_per_token"]
        print(f"target {kind}: faster than softmax-KV at t={last}: "
              f"{'PASS' if faster else 'MISS'}")
    speedup = greedy["attnkit"]["tokens_per_s"] / greedy["eager"]["tokens_per_s"]
    like = greedy["attnkit"]["tokens_per_s"] / greedy["eager_like"]["tokens_per_s"]
    print(f"target greedy >= 3x eager python KV loop: {speedup:.2f}x "
          f"{'PASS' if speedup >= 3 else 'MISS'} (like-for-like thread-wait settings: {like:.2f}x "
          f"{'PASS' if like >= 3 else 'MISS'})")
    if "ct2" in greedy:
        r = greedy["attnkit"]["tokens_per_s"] / greedy["ct2"]["tokens_per_s"]
        print(f"target greedy >= CTranslate2: {r:.2f}x {'PASS' if r >= 1 else 'MISS'}")
    else:
        print("target greedy >= CTranslate2: not measured")
    print(f"load average (1, 5, 15 min) at the end: {load_averages()}")


if __name__ == "__main__":
    main()
