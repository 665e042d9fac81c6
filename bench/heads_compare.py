#!/usr/bin/python3
"""Pruned vs unpruned inference throughput (bench/heads_bench.cpp): a BERT-base-shaped model
(12 layers, 12 heads, hidden 768, random weights) with 50% of its heads physically pruned vs the
same model unpruned, same process settings, one fresh process per case, cases interleaved.
Each case runs `--rounds` times, unpruned and pruned alternating, and the best tokens/s of each
is kept (the machine is shared: the best run is the one least disturbed). Prints one table:
tokens/s of each and the speed-up (pruned / unpruned - 1).

Then, when scripts/setup.sh has fetched it, the same for a real grouped-query model:
SmolLM2-135M-Instruct from its GGUF file (30 layers, 9 query heads in 3 key/value groups),
unpruned vs one of its three key/value groups removed from every layer (90 of 270 query heads,
the group's K/V rows too), a forward pass over random ids (the transformer stack; no LM head).

  /usr/bin/python3 bench/heads_compare.py --build build [--quick] [--threads 2]"""
import argparse
import json
import os
import subprocess


def run(build, pruned, batch, n, threads, repeats, extra=()):
    cmd = [os.path.join(build, "attnkit_bench_heads"), "--pruned", str(pruned), "--batch", str(batch),
           "--n", str(n), "--threads", str(threads), "--repeats", str(repeats), "--warmup", "1", *extra]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="batch 1 and 16 at n=128 only")
    parser.add_argument("--full", action="store_true", help="also batch 64 (slow on 2 cores)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="", help="e.g. 1x128,16x512 (batch x n)")
    args, _ = parser.parse_known_args()  # run.sh passes compare.py options too
    cases = [(1, 128), (1, 512), (16, 128), (16, 512)]
    if args.quick:
        cases = [(1, 128), (16, 128)]
    if args.full:
        cases += [(64, 128), (64, 512)]
    if args.cases:
        cases = [tuple(int(v) for v in c.split("x")) for c in args.cases.split(",")]
    print("| batch | n | unpruned tokens/s | 50% heads pruned tokens/s | speed-up |")
    print("|---|---|---|---|---|")
    for batch, n in cases:
        repeats = max(1, min(10, 2048 // (batch * n)))
        best = {0.0: 0.0, 0.5: 0.0}
        for _ in range(args.rounds):
            for pruned in (0.0, 0.5):
                r = run(args.build, pruned, batch, n, args.threads, repeats)
                best[pruned] = max(best[pruned], r["tokens_per_s"])
        speedup = best[0.5] / best[0.0] - 1
        print(f"| {batch} | {n} | {best[0.0]:.1f} | {best[0.5]:.1f} | {100 * speedup:+.1f}% |", flush=True)
    smollm2 = os.path.join(os.environ.get("ATTNKIT_CACHE", os.path.expanduser("~/.cache/attnkit")),
                           "weights", "smollm2-135m-instruct.gguf")
    if not os.path.exists(smollm2):
        print(f"\nheads_compare.py: no {smollm2} (scripts/setup.sh fetches it): skipping SmolLM2")
        return
    print(f"\nSmolLM2-135M-Instruct ({smollm2}), float32, {args.threads} threads, best of {args.rounds}:")
    print("| batch | n | unpruned tokens/s | 1 of 3 key/value groups pruned tokens/s | speed-up |")
    print("|---|---|---|---|---|")
    for batch, n in ([(1, 128), (1, 512)] if args.quick else [(1, 128), (1, 512), (1, 2048)]):
        repeats = max(1, min(5, 1024 // (batch * n)))
        best = {0: 0.0, 1: 0.0}
        for _ in range(args.rounds):
            for groups in (0, 1):
                r = run(args.build, 0, batch, n, args.threads, repeats,
                        ("--model", smollm2, "--pruned-groups", str(groups)))
                best[groups] = max(best[groups], r["tokens_per_s"])
        speedup = best[1] / best[0] - 1
        print(f"| {batch} | {n} | {best[0]:.1f} | {best[1]:.1f} | {100 * speedup:+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
