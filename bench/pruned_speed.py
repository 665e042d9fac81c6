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

    /usr/bin/python3 bench/pruned_speed.py --report-only   # re-render the docs from the JSON

Writes docs/pruned-speed.json and its table in docs/analysis.md (between the pruned-speed markers;
tests/python/test_docs_tables.py checks that the two agree). Timings are attnkit's own (--json "timing":
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
from gnu_time import render_from_json, replace_region, write_json  # noqa: E402

JSON_PATH = os.path.join(ROOT, "docs", "pruned-speed.json")
DOC_PATH = os.path.join(ROOT, "docs", "analysis.md")
BEGIN, END = "<!-- pruned-speed:begin -->", "<!-- pruned-speed:end -->"

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
    p.add_argument("--report-only", action="store_true", help="re-render docs/analysis.md from docs/pruned-speed.json")
    a = p.parse_args()
    if a.report_only:
        return render_from_json(JSON_PATH, DOC_PATH, BEGIN, END, markdown, "pruned_speed")
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
    write_json(JSON_PATH, result)
    print(markdown(result))
    replace_region(DOC_PATH, BEGIN, END, markdown(result))
    print("pruned_speed.py: wrote docs/pruned-speed.json and docs/analysis.md")


def markdown(result):
    """The docs/analysis.md region of a run (rendered from its JSON alone; test_docs_tables checks it)."""
    base = result["cells"]["unpruned"]
    removed = "; ".join(f"{count} groups: " + ", ".join(f"L{layer} g{'+'.join(map(str, gs))}" for layer, gs in
                                                        sorted(groups.items(), key=lambda x: int(x[0])))
                        for count, groups in result["removed_groups"].items())
    lines = [BEGIN, "",
             f"SmolLM2-135M-Instruct (its GGUF file converted to attnkit's format, float32), the least important "
             f"key/value groups by the group importance of `scripts/pretrained_heads.sh smollm2` (validation verses) "
             f"removed physically by `attnkit prune` (at least one group kept per layer; removed: {removed}). "
             f"`attnkit generate --json` timings (measured inside the process), {result['threads']} thread(s), "
             f"{result['isa']}: greedy decoding of {result['new_tokens']} new tokens after a "
             f"{result['prompt_tokens']}-token chat prompt, and the prefill of {result['prefill_tokens']} prompt "
             f"tokens; {result['rounds']} rounds, every model once per round, one process per run; load average "
             f"{result['load_average_end']:.2f} at the end. Speed-up = unpruned time / pruned time per round: "
             f"median [min, max] over the rounds. Run {result['date']} by `/usr/bin/python3 bench/pruned_speed.py "
             "--build build`.", "",
             "| model | decode s (median) | decode speed-up [min, max] | prefill s (median) | prefill speed-up [min, max] |",
             "|---|---|---|---|---|"]
    for name, c in result["cells"].items():
        row = [f"| {name} removed" if name != "unpruned" else "| unpruned"]
        for key in ("decode_s", "prefill_s"):
            ratios = [b / x for b, x in zip(base[key], c[key])]
            row.append(f" | {statistics.median(c[key]):.3f} | " +
                       ("—" if name == "unpruned" else
                        f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}, {max(ratios):.2f}]"))
        lines.append("".join(row) + " |")
    lines += ["", END, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
