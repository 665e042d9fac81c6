#!/usr/bin/python3
"""Physical pruning of whole key/value groups of SmolLM2-135M and the speed it buys (issue 42,
part 6): `attnkit prune --heads` removes the least important groups (all query heads of a group,
then its key/value head), by the group importance of a finished `analyze heads` run
(scripts/pretrained_heads.sh smollm2: RUN/heads/heads.json, "group_importance", from the
validation verses), keeping at least one group per layer; then `attnkit generate` times greedy
decoding and the prefill of the unpruned model (the GGUF file converted to attnkit's format, so
both sides load the same way) and of each pruned one, in one process per run, alternating, on the
same prompt ids.

    /usr/bin/python3 bench/pruned_speed.py --build build --heads-json runs/smollm2-heads/heads/heads.json
        [--groups 5 45] [--threads 1] [--new-tokens 128] [--prefill-n 1024] [--rounds 5]

Writes docs/pruned-speed.json; prints a table. Timings are attnkit's own (--json "timing":
prefill_s, decode_s, measured inside the process). The per-round speed-up is unpruned time over
pruned time; the table gives its median and [min, max] over the rounds."""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_process import run_or_exit, thread_env  # noqa: E402
from gnu_time import write_json  # noqa: E402

GGUF = os.path.expanduser("~/.cache/attnkit/weights/smollm2-135m-instruct.gguf")
PROMPT = ("<|im_start|>user\nWrite a short story about a lighthouse keeper who finds a message in a "
          "bottle.<|im_end|>\n<|im_start|>assistant\n")


def run(argv, threads):
    return run_or_exit(argv, "pruned_speed", thread_env(threads))


def groups_to_prune(heads_json, count):
    """{layer: [query heads]} removing the `count` groups of lowest group importance, at least one
    group kept per layer (query head h belongs to group h // (query heads / groups))."""
    h = json.load(open(heads_json))
    table = h["importance"]["group_importance"]
    queries = len(h["importance"]["importance"][0])
    per_group = queries // len(table[0])
    ranked = sorted((score, layer, g) for layer, row in enumerate(table) for g, score in enumerate(row))
    left = [len(row) for row in table]
    chosen = {}
    for _, layer, g in ranked:
        if sum(len(v) for v in chosen.values()) == count:
            break
        if left[layer] <= 1:
            continue
        left[layer] -= 1
        chosen.setdefault(layer, []).append(g)
    if sum(len(v) for v in chosen.values()) < count:
        sys.exit(f"pruned_speed: only {sum(len(v) for v in chosen.values())} groups can go with one kept per layer")
    return {str(layer): sorted(q for g in gs for q in range(g * per_group, (g + 1) * per_group))
            for layer, gs in sorted(chosen.items())}, {str(k): sorted(v) for k, v in chosen.items()}


def timing(attnkit, model, threads, ids, new_tokens):
    doc = json.loads(run([attnkit, "--threads", str(threads), "--quiet", "generate", "--model", model,
                          "--prompt-ids", " ".join(map(str, ids)), "--json", "--no-eos",
                          "--max-new-tokens", str(new_tokens)], threads).splitlines()[0])
    t = doc["timing"]
    return {"prefill_s": t["prefill_s"], "decode_s": t["decode_s"], "tokens": t["new_tokens"],
            "ids": doc["results"][0].get("ids", [])}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--heads-json", default="runs/smollm2-heads/heads/heads.json")
    p.add_argument("--groups", type=int, nargs="+", default=[5, 45])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prefill-n", type=int, default=1024, help="prompt tokens of the prefill cell")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--work", default=os.path.expanduser("~/.cache/attnkit/bench/pruned"))
    a = p.parse_args()
    attnkit = os.path.join(a.build, "attnkit")
    os.makedirs(a.work, exist_ok=True)
    models = {"unpruned": os.path.join(a.work, "unpruned")}
    if not os.path.exists(os.path.join(models["unpruned"], "config.json")):
        run([attnkit, "--quiet", "convert", "--from", GGUF, "--to", models["unpruned"]], a.threads)
    removed = {}
    for count in a.groups:
        heads, groups = groups_to_prune(a.heads_json, count)
        removed[count] = groups
        out = os.path.join(a.work, f"groups-{count}")
        with tempfile.TemporaryDirectory() as tmp:
            staging = os.path.join(tmp, "model")
            run([attnkit, "--quiet", "prune", "--model", models["unpruned"], "--heads", json.dumps(heads),
                 "--out", staging], a.threads)
            run(["rm", "-rf", out], 1)
            os.replace(staging, out)
        models[f"{count} groups"] = out
    doc = json.loads(run([attnkit, "--quiet", "generate", "--model", models["unpruned"], "--prompt", PROMPT,
                          "--max-new-tokens", "0", "--json"], 1).splitlines()[0])
    short = doc["results"][0]["prompt_ids"]
    long = (short * (a.prefill_n // len(short) + 1))[:a.prefill_n]
    cells = {name: {"decode": [], "prefill": []} for name in models}
    for _ in range(a.rounds):  # alternating: every model once per round
        for name, model in models.items():
            cells[name]["decode"].append(timing(attnkit, model, a.threads, short, a.new_tokens))
            cells[name]["prefill"].append(timing(attnkit, model, a.threads, long, 1))
    isa = "AVX-512" if "avx512f" in open("/proc/cpuinfo").read() else "AVX2 only"
    result = {"date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "isa": isa, "threads": a.threads,
              "new_tokens": a.new_tokens, "prompt_tokens": len(short), "prefill_tokens": len(long),
              "rounds": a.rounds, "removed_groups": removed, "load_average_end": os.getloadavg()[0],
              "cells": {name: {"decode_s": [c["decode_s"] for c in cell["decode"]],
                               "prefill_s": [c["prefill_s"] for c in cell["prefill"]]}
                        for name, cell in cells.items()}}
    write_json(os.path.join(ROOT, "docs", "pruned-speed.json"), result)
    base = result["cells"]["unpruned"]
    print(f"SmolLM2-135M, {a.threads} thread(s), {isa}; greedy {a.new_tokens} tokens after {len(short)} prompt "
          f"tokens; prefill of {len(long)} tokens; {a.rounds} alternating rounds")
    print("| model | decode s (median) | speed-up [min, max] | prefill s (median) | speed-up [min, max] |")
    print("|---|---|---|---|---|")
    for name, c in result["cells"].items():
        row = [f"| {name} "]
        for key in ("decode_s", "prefill_s"):
            ratios = [b / x for b, x in zip(base[key], c[key])]
            row.append(f"| {statistics.median(c[key]):.3f} | {statistics.median(ratios):.2f}× "
                       f"[{min(ratios):.2f}, {max(ratios):.2f}] ")
        print("".join(row) + "|")


if __name__ == "__main__":
    main()
