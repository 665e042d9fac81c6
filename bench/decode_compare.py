#!/usr/bin/python3
"""make bench, decoding part: per-token latency of a GPT-2-small-shaped model (12 layers, 768
hidden, random weights, batch 1, 2 threads) at positions 256, 1024, 4096 for the softmax KV cache
and the linear / cosFormer RNN state, and greedy tokens/s against the python3-torch eager KV-cache
loop (bench/decode_peer.py). Prints tables and the issue's targets as PASS/MISS.
--quick: smaller positions and model (a smoke run, no targets)."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"decode_compare: {' '.join(argv)} failed:\n{p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    a, _ = parser.parse_known_args()
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

    g = run_json([binary, "--mode", "greedy", "--kind", "softmax", *shape, *threads])[0]
    peer_shape = shape if not a.quick else shape
    peer = run_json(["/usr/bin/python3", os.path.join(HERE, "decode_peer.py"), *peer_shape,
                     *threads])[0]
    print()
    print(f"== greedy decoding, softmax KV cache, 16-token prompt, {g['new_tokens']} new tokens ==")
    print("| implementation | tokens/s |")
    print("|---|---|")
    print(f"| attnkit (decode::generate) | {g['tokens_per_s']:.1f} |")
    print(f"| python3-torch eager KV loop | {peer['tokens_per_s']:.1f} |")
    print("| CTranslate2 | not measured (no wheel in this environment) |")
    speedup = g["tokens_per_s"] / peer["tokens_per_s"]
    print(f"attnkit / eager: {speedup:.2f}x")
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
    print(f"target greedy >= 3x eager python KV loop: {speedup:.2f}x "
          f"{'PASS' if speedup >= 3 else 'MISS'}")


if __name__ == "__main__":
    main()
