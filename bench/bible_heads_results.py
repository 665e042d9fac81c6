#!/usr/bin/python3
"""Michel et al.'s experiment on the Bible translation model, on the leak-free split (issue 44):
the part of docs/analysis.md between its bible-heads markers, written from a finished run of
scripts/bible_heads.sh, and its numbers in docs/bible-heads.json.

    bash scripts/bible_heads.sh build runs/bible-clean 8 5          # hours of one core, niced, resumable
    /usr/bin/python3 bench/bible_heads_results.py --run runs/bible-clean
    /usr/bin/python3 bench/bible_heads_results.py --report-only     # re-render from the JSON

Everything chosen (the checkpoint, the head kept per layer, the pruning orders) is chosen on the
validation verses; every number reported is on the test verses. The markdown is rendered from the
JSON alone (tests/python/test_docs_tables.py checks the doc against markdown(json))."""
import argparse
import datetime
import json
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gnu_time import machine_isa, read_gnu_time, replace_region, write_json  # noqa: E402
from heads_tables import keep_one_and_single, level_until, profile_rows, unpruned  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- bible-heads:begin -->", "<!-- bible-heads:end -->"
JSON_PATH = os.path.join(ROOT, "docs", "bible-heads.json")
SITES = {"encoder.self": "encoder self", "decoder.self": "decoder self", "decoder.cross": "cross"}


def cpu_seconds_by_step(run):
    """{step: CPU seconds of training steps up to it, every process counted} from RUN/metrics.jsonl
    (cpu_seconds restart at each resume of a run without a CPU budget: earlier processes' last
    values are added, steps redone after a resume included)."""
    cpu_at, base, last = {}, 0.0, 0.0
    for line in open(os.path.join(run, "metrics.jsonl")):
        d = json.loads(line)
        if "cpu_seconds" in d:
            if d["cpu_seconds"] < last:  # a new process (resumed)
                base += last
            last = d["cpu_seconds"]
            cpu_at[d.get("step", 0)] = base + last
    return cpu_at


def training_summary(run):
    """Steps, the best checkpoint by validation BLEU and the CPU seconds of every training process
    (cpu_seconds_by_step's last value)."""
    best = None
    for line in open(os.path.join(run, "metrics.jsonl")):
        d = json.loads(line)
        if "best" in d:
            best = d["best"]
    cpu_at = cpu_seconds_by_step(run)
    steps = max(cpu_at, default=0)
    return {"steps": steps, "cpu_s": cpu_at.get(steps, 0.0), "best": best}


def read_settings(run):
    """The few training settings the text names, from RUN/config.toml."""
    text = open(os.path.join(run, "config.toml")).read()
    out = {}
    section = ""
    for line in text.splitlines():
        m = re.match(r"\s*\[(\w+)\]", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"\s*(\w+)\s*=\s*(.+?)\s*$", line)
        if m:
            out[f"{section}.{m.group(1)}"] = m.group(2).strip('"')
    return out


def summarize(out_dir):
    heads = json.load(open(os.path.join(out_dir, "heads", "heads.json")))
    split = json.load(open(os.path.join(out_dir, "split", "split.json")))
    run = os.path.join(out_dir, "run")
    settings = read_settings(run)
    keep, single = keep_one_and_single(heads, "bleu")
    rows, orders = profile_rows(heads, "bleu")
    importance, sites = heads["importance"]["importance"], heads["sites"]
    baseline = unpruned(heads)
    summary = {
        "date": datetime.date.today().isoformat(),
        "machine": machine_isa(),
        "split": {"source": split["source"], "pairs": split["pairs"], "dropped": split["dropped"],
                  "overlap_before_filter": split["overlap_before_filter"], "overlap": split["overlap"],
                  "threshold": split["near_duplicate_threshold"]},
        "model": {key: settings.get(key) for key in ("model.hidden", "model.layers", "model.heads",
                                                     "model.intermediate", "run.steps", "task.batch_size")},
        "training": training_summary(run),
        "test_scores": open(os.path.join(out_dir, "test-scores.txt")).read().strip().splitlines(),
        "heads_per_layer": len(importance[0]), "layers": sites[0]["layers"],
        "baseline": {"bleu": baseline["score"], "low": baseline["low"], "high": baseline["high"]},
        "bootstrap_samples": heads["random_orders"]["bootstrap_samples"],
        "random_orders": orders,
        "keep_one": keep, "single": single, "profile": rows,
    }
    for line in open(os.path.join(out_dir, "heads.time")):
        if "Command being timed" in line:
            command = line.split(":", 1)[1].strip().strip('"')
            summary["heads_command"] = re.sub(r"^nice -n 19 \S+/attnkit", "attnkit", command)
            parts = command.split()
            for flag, key in (("--score-data", "validation"), ("--data", "test")):
                path = os.path.join(ROOT, parts[parts.index(flag) + 1])
                summary[key + "_verses"] = sum(1 for _ in open(path))
    cpu, wall, peak = read_gnu_time(os.path.join(out_dir, "heads.time"))
    summary["heads_cpu_s"], summary["heads_wall_s"], summary["heads_peak_mib"] = cpu, wall, peak
    # The metric passes' own CPU seconds (heads/passes.jsonl; 0 for passes stored by a build that
    # did not record it): the cost across every process, the killed ones included.
    costs = [json.loads(line).get("cpu_s", 0.0) for line in open(os.path.join(out_dir, "heads", "passes.jsonl"))][1:]
    summary["passes"] = {"count": len(costs), "cpu_s": sum(costs), "timed": sum(1 for c in costs if c > 0)}
    return summary


def bleu(x):
    return f"{100 * x:.2f}"


def signed(x):
    return f"{100 * x:+.2f}"


def markdown(s):
    m, t, sp = s["model"], s["training"], s["split"]
    before = sp["overlap_before_filter"]
    out = [BEGIN, "", "Generated by `bench/bible_heads_results.py` from a run of `scripts/bible_heads.sh` "
           "(numbers in `docs/bible-heads.json`); do not edit by hand.", "",
           f"*Data.* {sp['source']}: {sp['pairs']['train']:,} training, {sp['pairs']['validation']} validation and "
           f"{sp['pairs']['test']:,} test verse pairs. Before the near-duplicate filter, "
           f"{before['test']['at_least_50']} test and {before['validation']['at_least_50']} validation verses shared "
           f"≥ {100 * sp['threshold']:.0f}% of their word 4-grams with one training verse; they were dropped "
           f"({sp['dropped']['test']} test, {sp['dropped']['validation']} validation): now "
           f"{sp['overlap']['test']['at_least_50']} and {sp['overlap']['validation']['at_least_50']} "
           "(the old split: 98 of 994 test verses).", "",
           f"*Model and budget.* Encoder–decoder, {m['model.layers']} + {m['model.layers']} layers, hidden "
           f"{m['model.hidden']}, **{m['model.heads']} heads at each of the three sites** "
           f"({3 * int(m['model.layers']) * int(m['model.heads'])} heads), feed-forward {m['model.intermediate']}; "
           f"{t['steps']:,} steps of {m['task.batch_size']} pairs on one thread, {t['cpu_s'] / 60:.0f} CPU minutes of "
           "training steps in all (several processes: the run resumed across sessions, steps after the last "
           "checkpoint redone). The checkpoint kept is the best by validation BLEU (100 verses): step "
           f"{t['best']['step']:,}, validation BLEU {bleu(t['best']['value'])}. Its test scores (`attnkit eval "
           "--checkpoint best --split test --examples 0`, greedy):", "", "```"] + s["test_scores"] + ["```", "",
           f"*Heads.* `{s['heads_command']}`: importance from the {s['validation_verses']} validation verses, "
           f"every number below on the {s['test_verses']:,} test verses (greedy decodes, sources cut to 96 tokens; "
           f"the processes that finished: {s['heads_cpu_s'] / 60:.0f} CPU min, {s['heads_wall_s'] / 60:.0f} min wall, peak "
           f"{s['heads_peak_mib']:,.0f} MiB; {s['passes']['count']} metric passes, of which the "
           f"{s['passes']['timed']} timed took {s['passes']['cpu_s'] / 60:.0f} CPU min, "
           f"{s['passes']['cpu_s'] / max(s['passes']['timed'], 1):.0f} s each). Unpruned test BLEU {bleu(s['baseline']['bleu'])} "
           f"[{bleu(s['baseline']['low'])}, {bleu(s['baseline']['high'])}]. Intervals: 95% paired bootstrap over "
           f"the test verses ({s['bootstrap_samples']} resamples, sacreBLEU's), against the unpruned model; "
           "\"level\" where the interval touches 0. BLEU × 100.", "",
           "*Keeping one head per layer and site* (the paper's Table 3 setting): the head of highest validation "
           "importance kept, the layer's other heads at that site masked, the other sites untouched:", "",
           "| site | layer | head kept | BLEU | change [95%] | verdict | range over the layer's heads kept alone |",
           "|---|---|---|---|---|---|---|"]
    for k in s["keep_one"]:
        out.append(f"| {SITES[k['site']]} | {k['layer'] + 1} | {k['head']} | {bleu(k['bleu'])} | "
                   f"{signed(k['score'])} [{signed(k['low'])}, {signed(k['high'])}] | {k['verdict']} | "
                   f"{bleu(k['all_heads_min'])}–{bleu(k['all_heads_max'])} |")
    out += ["", "*Each head masked alone*: heads whose masking moves test BLEU beyond its interval, per site:", ""]
    for site, label in SITES.items():
        cells = [c for c in s["single"] if c["site"] == site]
        moved = [c for c in cells if c["verdict"] != "level"]
        worst = min(cells, key=lambda c: c["difference"])
        out.append(f"- {label}: {len(moved)} of {len(cells)}"
                   + (" (" + ", ".join(f"L{c['layer'] + 1} h{c['head']} {signed(c['difference'])} "
                                       f"[{signed(c['low'])}, {signed(c['high'])}]" for c in moved) + ")"
                      if moved else "")
                   + f"; largest drop L{worst['layer'] + 1} h{worst['head']} {signed(worst['difference'])} "
                     f"[{signed(worst['low'])}, {signed(worst['high'])}]")
    out += ["", f"*Global pruning, least important first* (the paper's Figure 6; importance and its order from the "
            f"validation verses; {s['random_orders']} random orders beside it, their mean ± sd over orders "
            "(a t interval over so few orders reaches below 0); importance − random by the two-stage bootstrap of this document's statistics section; heads "
            f"gone per site out of {s['heads_per_layer'] * s['layers']}):", "",
            "| pruned | BLEU, importance order | change vs unpruned [95%] | random orders: mean ± sd | "
            "reverse order | importance − random [95%] | verdict | encoder self | decoder self | cross |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["profile"]:
        c, rnd, d = r["change"], r["random"], r["importance_minus_random"]
        by = r["pruned_by_site"]
        out.append(f"| {100 * r['fraction']:.0f}% ({r['pruned']}) | {bleu(r['bleu'])} | {signed(c['score'])} "
                   f"[{signed(c['low'])}, {signed(c['high'])}] | {bleu(rnd['mean'])} ± {bleu(rnd['sd'])} | {bleu(r['reverse'])} | {signed(d['score'])} [{signed(d['low'])}, "
                   f"{signed(d['high'])}] | {r['verdict']} | " + " | ".join(str(by.get(k, 0)) for k in SITES) + " |")
    kept, lost = level_until(s["profile"])
    out += ["", (f"Pruning by importance stays level with the unpruned model (interval touching 0) up to "
                 f"{100 * kept['fraction']:.0f}% of the heads ({kept['pruned']}); the first step that loses "
                 f"BLEU beyond its interval is {100 * lost['fraction']:.0f}% ({lost['pruned']})."
                 if kept and lost else "No pruning step loses BLEU beyond its interval." if not lost else
                 "The first pruning step already loses BLEU beyond its interval."), "", END]
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", help="the OUT folder of scripts/bible_heads.sh")
    p.add_argument("--report-only", action="store_true", help="re-render docs from docs/bible-heads.json")
    args = p.parse_args()
    if args.report_only:
        summary = json.load(open(JSON_PATH))
    elif args.run:
        summary = summarize(args.run)
        write_json(JSON_PATH, summary)
    else:
        p.error("--run (or --report-only)")
    replace_region(os.path.join(ROOT, "docs", "analysis.md"), BEGIN, END, markdown(summary))
    print("bible_heads_results.py: wrote docs/bible-heads.json and docs/analysis.md")


if __name__ == "__main__":
    main()
