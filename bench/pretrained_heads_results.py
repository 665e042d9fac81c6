#!/usr/bin/python3
"""Michel et al.'s experiment on real pretrained models (issues 42 and 44): the tables of
docs/analysis.md between its pretrained-heads markers, written from the runs of
scripts/pretrained_heads.sh, and their numbers in docs/pretrained-heads.json.

    bash scripts/pretrained_heads.sh smollm2 build runs/smollm2-heads 128 5      # hours, niced
    /usr/bin/python3 bench/pretrained_heads_results.py --model smollm2 --run runs/smollm2-heads
    /usr/bin/python3 bench/pretrained_heads_results.py --report-only              # re-render
    /usr/bin/python3 bench/pretrained_heads_results.py --model smollm2 --run runs/smollm2-heads --collapse-only

Each model's summary (from RUN/heads/heads.json, RUN/heads.time and, when there,
RUN/collapse/collapse.json and RUN/collapse-random/collapse.json: the trained paths and random
weights of the same shape) replaces that model's entry of docs/pretrained-heads.json; the
markdown is rendered from the whole JSON, so a doc table is never edited by hand
(tests/python/test_docs_tables.py checks that it equals markdown(json))."""
import argparse
import datetime
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gnu_time import machine_isa, read_gnu_time, replace_region, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- pretrained-heads:begin -->", "<!-- pretrained-heads:end -->"
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct (its GGUF file: 30 layers x 9 query heads in 3 key/value groups = 270 "
               "heads, 90 groups)",
    "gemma3": "Gemma 3 270M (its GGUF file: 18 layers x 4 query heads sharing 1 key/value head)",
}


def interval(d):
    return {"score": d["score"], "low": d["low"], "high": d["high"]}


def summarize(name, run):
    heads = json.load(open(os.path.join(run, "heads", "heads.json")))
    bands = {b["unit"]: b for b in heads["random_orders"]["bands"]}
    units = {}
    for p in heads["profiles"]:
        unit = p.get("unit", "head")
        if p["order"] != "importance" or "statistics" not in p:
            continue
        stats = {s["step"]: s for s in p["statistics"]["vs_unpruned"]}
        band = bands.get(unit, {"steps": [], "importance_vs_random": [], "seeds": []})
        versus = {c["step"]: c for c in band["importance_vs_random"]}
        rows = []
        for k, step in enumerate(p["steps"]):
            if k == 0:
                continue
            row = {"fraction": step["fraction"], "pruned": step["pruned"], "perplexity": step["perplexity"]}
            if k in stats:
                row["relative"] = interval(stats[k]["relative"])
            if k < len(band["steps"]) and "perplexity" in band["steps"][k]:
                r = band["steps"][k]["perplexity"]
                row["random_perplexity"] = {"mean": r["mean"], "sd": r["sd"], "low": r["low"], "high": r["high"]}
            if k in versus:
                row["importance_minus_random"] = interval(versus[k]["difference"])
                row["verdict"] = versus[k]["verdict_text"]
            rows.append(row)
        budget = p["statistics"].get("perplexity_budget")
        units[unit] = {"rows": rows, "random_orders": len(band["seeds"]), "budget": budget}
    summary = {"model": MODELS[name], "file": os.path.basename(heads["model"]),
               "baseline_perplexity": heads["baseline_perplexity"],
               "importance_data": heads["importance_data"], "evaluation_data": None,
               "bootstrap_samples": heads["random_orders"]["bootstrap_samples"], "units": units,
               "date": datetime.date.today().isoformat(),
               "machine": machine_isa()}
    for line in open(os.path.join(run, "heads.time")):
        if "Command being timed" in line:
            command = line.split(":", 1)[1].strip().strip('"')
            summary["command"] = command.replace(os.path.expanduser("~"), "~")
            parts = command.split()
            if "--data" in parts:
                summary["evaluation_data"] = parts[parts.index("--data") + 1]
            if "--max-length" in parts:
                summary["window"] = int(parts[parts.index("--max-length") + 1])
    cpu, wall, peak = read_gnu_time(os.path.join(run, "heads.time"))
    summary["cpu_s"], summary["wall_s"], summary["peak_mib"] = cpu, wall, peak
    # An analysis resumed across sessions: the processes killed at a session's end left no time
    # report, so the CPU time is the passes' own (each pass of passes.jsonl records its cpu_s).
    passes = [json.loads(line) for line in open(os.path.join(run, "heads", "passes.jsonl"))][1:]
    if passes:
        summary["passes"] = len(passes)
        summary["passes_cpu_s"] = sum(p.get("cpu_s", 0.0) for p in passes)
    for field in ("importance_data", "evaluation_data"):
        path = summary[field]
        if path and os.path.exists(path):
            summary[field] = {"path": path, "lines": sum(1 for _ in open(path))}
    summary.update(collapse_summaries(run))
    return summary


def collapse_summary(path):
    """The last layer of an `analyze collapse` collapse.json: per variant the geometric mean of the
    relative composite residual over the inputs (where X did not vanish) and its [min, max]; the
    variants whose X vanished on some inputs; the inputs and the number of models (random draws)."""
    c = json.load(open(path))
    result = c["results"][0]
    last, spread, vanished = {}, {}, []
    for curve in result["variants"]:
        layer = curve["layers"][-1] if curve.get("layers") else None
        rel = layer["relative_composite"] if layer else None
        if layer and layer.get("vanished"):  # X itself is 0 on these inputs: no relative residual
            vanished.append([curve["name"], layer["vanished"]])
        # geometric mean over inputs = 10^(mean of log10), over the inputs where X did not vanish
        ok = rel and rel.get("count") and rel.get("log10_mean") is not None
        last[curve["name"]] = 10 ** rel["log10_mean"] if ok else None
        spread[curve["name"]] = [rel["min"], rel["max"]] if ok else None
    return {"inputs": c["inputs"], "models": result.get("models", 1), "last_layer": last, "range": spread,
            "vanished": vanished}


def collapse_summaries(run):
    """{"collapse": trained, "collapse_random": random weights of its shape} from RUN/collapse and
    RUN/collapse-random, each when there."""
    out = {}
    for key, folder in (("collapse", "collapse"), ("collapse_random", "collapse-random")):
        path = os.path.join(run, folder, "collapse.json")
        if os.path.exists(path):
            out[key] = collapse_summary(path)
    return out


def range_verdict(trained, random):
    """"below" / "above" when the [min, max] of the trained inputs' residuals lies wholly below /
    above that of the random draws' inputs, else "overlap"."""
    return "below" if trained[1] < random[0] else "above" if trained[0] > random[1] else "overlap"


def collapse_comparison(trained, random):
    """range_verdict per variant with both ranges."""
    out = {}
    for variant, t in trained.get("range", {}).items():
        r = random.get("range", {}).get(variant)
        if t and r:
            out[variant] = range_verdict(t, r)
    return out


def pct(x):
    return f"{100 * x:+.1f}%"


def markdown(results):
    out = [BEGIN, "", "Generated by `bench/pretrained_heads_results.py` from the runs of "
           "`scripts/pretrained_heads.sh` (numbers in `docs/pretrained-heads.json`); do not edit by hand.", ""]
    for name in sorted(results):
        s = results[name]
        imp, ev = s["importance_data"], s["evaluation_data"]
        out += [f"#### {s['model']}", "",
                f"Run {s['date']} on {s['machine']}: `{s['command']}` ("
                + (f"{s['passes']} metric passes, {s['passes_cpu_s'] / 60:.0f} CPU min in them (passes.jsonl; "
                   f"resumed across sessions, so no whole-process wall time); the last process "
                   if s.get("passes_cpu_s", 0) > 1.5 * s["cpu_s"] else "")
                + f"{s['wall_s'] / 60:.0f} min wall, "
                f"{s['cpu_s'] / 60:.0f} CPU min, peak {s['peak_mib']:,.0f} MiB, niced beside other work). "
                f"Importance from {imp['lines']} verses of the validation books ({imp['path']}), every number "
                f"below on {ev['lines']} verses of the test books ({ev['path']}), windows of {s.get('window', 128)} tokens. "
                f"Unpruned perplexity {s['baseline_perplexity']:.2f}. Intervals: 95% paired bootstrap over "
                f"the evaluation windows ({s['bootstrap_samples']} resamples) against the unpruned model; "
                "the random orders' mean ± sd over orders (a t interval over so few orders reaches below 0); "
                "importance minus random by the "
                "two-stage bootstrap (windows and orders) of docs/analysis.md, \"level\" where it covers 0.", ""]
        for unit, label in (("head", "query heads"), ("group", "key/value groups")):
            u = s["units"].get(unit)
            if not u:
                continue
            if unit == "group" and all(r["pruned"] == 0 for r in u["rows"]):
                # One key/value head per layer: a group is a whole layer's attention, which the
                # group profile does not remove; say so instead of a table of zeros.
                out += ["Key/value groups: every layer has one key/value head, so a group is a whole layer's "
                        "attention; the group profile removes none (its steps keep every group).", ""]
                continue
            out += [f"Pruning {label}, least important first ({u['random_orders']} random orders beside it):", "",
                    f"| {label} pruned | perplexity | change [95% interval] | random orders: perplexity "
                    "mean ± sd | importance − random [95%] | verdict |",
                    "|---|---|---|---|---|---|"]
            for r in u["rows"]:
                rel = r.get("relative")
                ran = r.get("random_perplexity")
                diff = r.get("importance_minus_random")
                out.append(
                    f"| {r['pruned']} ({100 * r['fraction']:.1f}%) | {r['perplexity']:.2f} | "
                    + (f"{pct(rel['score'])} [{pct(rel['low'])}, {pct(rel['high'])}]" if rel else "—") + " | "
                    + (f"{ran['mean']:.2f} ± {ran['sd']:.2f}" if ran else "—") + " | "
                    + (f"{diff['score']:+.2f} [{diff['low']:+.2f}, {diff['high']:+.2f}]" if diff else "—") + " | "
                    + r.get("verdict", "—") + " |")
            b = u["budget"]
            if b:
                if b["step"] == 0:
                    text = f"no {label} can go at ≤ 5% perplexity increase: the first step already exceeds it."
                else:
                    kept = b["kept_per_layer"]
                    thinned = [f"L{i} keeps {k}" for i, k in enumerate(kept) if k < max(kept)]
                    text = (f"at ≤ 5% perplexity increase (point estimate), {b['pruned']} {label} go "
                            f"({pct(b['increase'])} [{pct(b['low'])}, {pct(b['high'])}]); with the interval's upper "
                            f"end held to 5%, {b['pruned_upper']}. Layers that lose heads at that step: "
                            + (", ".join(thinned) if thinned else "none") + ".")
                out += ["", text[0].upper() + text[1:], ""]
        c = s.get("collapse")
        if c:
            last = c["last_layer"]
            label = {"pure_attention": "pure attention", "attention_skip": "attention + skip",
                     "attention_mlp": "attention + MLP", "attention_layer_norm": "attention + norm",
                     "full_block": "full block"}
            cells = ", ".join(f"{label.get(v, v)} {last[v]:.2e}" for v in last if last[v] is not None)
            gone = [f"{label.get(v, v)} on {n} of the {c['inputs']['samples']} inputs"
                    for v, n in c.get("vanished", [])]
            inputs = c["inputs"]
            out += [f"Rank collapse of its trained paths (`analyze collapse`, {inputs['samples']} windows of "
                    f"{inputs['seq_len']} tokens of the evaluation text): "
                    f"relative residual after the last layer, geometric mean over inputs: {cells}"
                    + (f"; the path's output X itself is 0 at the last layer (no relative residual) for "
                       f"{', '.join(gone)}" if gone else "") + ".", ""]
            r = s.get("collapse_random")
            if r:
                rl = r["last_layer"]
                random_cells = ", ".join(f"{label.get(v, v)} {rl[v]:.2e}" for v in rl if rl[v] is not None)
                compared = collapse_comparison(c, r)
                words = {w: [label.get(v, v) for v, x in compared.items() if x == w] for w in ("below", "above", "overlap")}
                verdict = "; ".join(f"{what} for {', '.join(words[w])}" for w, what in (
                    ("below", "every trained input below every random one"),
                    ("above", "every trained input above every random one"),
                    ("overlap", "the ranges overlap")) if words[w])
                rgone = [f"{label.get(v, v)} on {n} of the {r['models'] * r['inputs']['samples']} inputs"
                         for v, n in r.get("vanished", [])]
                out += [f"The same windows through random weights of its shape (`analyze collapse --random MODEL "
                        f"--no-short-paths`, {r['models']} draws at init std 0.02): {random_cells}"
                        + (f"; X itself is 0 at the last layer for {', '.join(rgone)}" if rgone else "")
                        + f". Per input (relative composite residual after the last layer, [min, max] over the "
                        f"inputs): {verdict}.", ""]
    out.append(END)
    return "\n".join(out) + "\n"


def write_docs(results):
    write_json(os.path.join(ROOT, "docs", "pretrained-heads.json"), results)
    replace_region(os.path.join(ROOT, "docs", "analysis.md"), BEGIN, END, markdown(results))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS))
    p.add_argument("--run", help="the OUT folder of scripts/pretrained_heads.sh")
    p.add_argument("--report-only", action="store_true", help="re-render docs from docs/pretrained-heads.json")
    p.add_argument("--collapse-only", action="store_true",
                   help="refresh only the model's rank-collapse entries (RUN/collapse, RUN/collapse-random), "
                        "keeping its head profiles")
    args = p.parse_args()
    path = os.path.join(ROOT, "docs", "pretrained-heads.json")
    results = json.load(open(path)) if os.path.exists(path) else {}
    if not args.report_only:
        if not args.model or not args.run:
            p.error("--model and --run (or --report-only)")
        if args.collapse_only:
            if args.model not in results:
                sys.exit(f"pretrained_heads_results: --collapse-only needs {args.model}'s entry in "
                         "docs/pretrained-heads.json (run without it first)")
            found = collapse_summaries(args.run)
            if not found:
                sys.exit(f"pretrained_heads_results: no {args.run}/collapse*/collapse.json")
            results[args.model].update(found)
        else:
            results[args.model] = summarize(args.model, args.run)
    write_docs(results)
    print(f"pretrained_heads_results.py: wrote docs/pretrained-heads.json and docs/analysis.md ({len(results)} models)")


if __name__ == "__main__":
    main()
