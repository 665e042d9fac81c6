#!/usr/bin/python3
"""Michel et al.'s experiment on the small classifier of docs/analysis.md ("A classifier fine-tuned
with attnkit train --init"): the part of docs/analysis.md between its classifier-heads markers,
written from a run of scripts/heads_experiment.sh, and its numbers in docs/classifier-heads.json.

    bash scripts/heads_experiment.sh build runs/heads 5        # a few CPU minutes
    /usr/bin/python3 bench/classifier_heads_results.py --run runs/heads
    /usr/bin/python3 bench/classifier_heads_results.py --report-only     # re-render from the JSON

The checkpoint, the importance and every pruning order are chosen on the validation examples;
every number reported is on the test examples. The markdown is rendered from the JSON alone
(tests/python/test_docs_tables.py checks the doc against markdown(json))."""
import datetime
import json
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gnu_time import machine_isa, read_gnu_time, results_driver_main  # noqa: E402
from heads_tables import keep_one_and_single, level_until, profile_rows, pruning_steps, unpruned  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- classifier-heads:begin -->", "<!-- classifier-heads:end -->"
JSON_PATH = os.path.join(ROOT, "docs", "classifier-heads.json")
STAGES = ("train", "heads", "exact", "prune", "over-training")


def examples(path):
    """Lines of a TSV file and the words of its first example."""
    lines = open(path).read().splitlines()
    return {"examples": len(lines), "words": len(lines[0].split("\t")[0].split())}


def command(time_file):
    """The timed command of a /usr/bin/time -v report, the build's path and the run's folder dropped."""
    text = open(time_file).read()
    line = re.search(r'Command being timed: "(.*)"', text).group(1)
    return re.sub(r"^\S*attnkit", "attnkit", line)


def profile_with_intervals(profile):
    """Rows of one order's profile: pruned heads, accuracy and its change against the unpruned model."""
    return [{"fraction": step["fraction"], "pruned": step["pruned"], "accuracy": step["metric"], "change": change}
            for _, step, change in pruning_steps(profile)]


def summarize(out, build):
    del build  # every number comes from the run's files
    heads = json.load(open(os.path.join(out, "analysis", "heads.json")))
    exact = json.load(open(os.path.join(out, "analysis-exact", "heads.json")))
    over = json.load(open(os.path.join(out, "over-training", "heads_over_training.json")))
    config = json.load(open(os.path.join(out, "base", "config.json")))
    metrics = [json.loads(line) for line in open(os.path.join(out, "run", "metrics.jsonl"))]
    best = [m["best"] for m in metrics if "best" in m][-1]
    evals = [{"step": m["step"], "accuracy": m["eval"]["accuracy"]} for m in metrics if "eval" in m]
    keep, single = keep_one_and_single(heads, "accuracy")
    rows, orders = profile_rows(heads, "accuracy")
    exact_profile = next(p for p in exact["profiles"] if p["order"] == "importance")
    costs = {}
    for stage in STAGES:
        cpu, wall, peak = read_gnu_time(os.path.join(out, stage + ".time"))
        costs[stage] = {"command": command(os.path.join(out, stage + ".time")), "cpu_s": cpu, "wall_s": wall,
                        "peak_mib": peak}
    checkpoints = []
    for c in over["checkpoints"]:
        profile = next(p for p in c["analysis"]["profiles"] if p["order"] == "importance")
        checkpoints.append({"step": c["step"], "unpruned": profile["steps"][0]["metric"],
                            "rows": profile_with_intervals(profile)})
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine_isa(),
        "data": {name: examples(os.path.join(out, name + ".tsv")) for name in ("train", "val", "test", "other")},
        "model": {"layers": config["num_hidden_layers"], "heads": config["num_attention_heads"],
                  "hidden": config["hidden_size"], "intermediate": config["intermediate_size"],
                  "vocabulary": config["vocab_size"]},
        "training": {"evals": evals, "best": best},
        "test_scores": open(os.path.join(out, "test-scores.txt")).read().strip(),
        "costs": costs,
        "importance": heads["importance"]["importance"],
        "baseline": unpruned(heads),
        "bootstrap_samples": heads["random_orders"]["bootstrap_samples"],
        "random_orders": orders,
        "keep_one": keep, "single": single, "profile": rows,
        "exact": profile_with_intervals(exact_profile),
        "cross_data": {"pearson": heads["cross_data"]["pearson"], "spearman": heads["cross_data"]["spearman"]},
        "over_training": checkpoints,
    }


def acc(x):
    return f"{x:.3f}"


def points(x):
    return f"{100 * x:+.1f}"


def change(c):
    return f"{points(c['score'])} [{points(c['low'])}, {points(c['high'])}]"


def importance_verdicts(rows):
    """The steps of each verdict of importance against the random orders."""
    out = {}
    for r in rows:
        out.setdefault(r["verdict"], []).append(f"{100 * r['fraction']:.0f}%")
    return out


def first_eval(s, step):
    """The validation accuracy of the training run's evaluation at step."""
    return next(e["accuracy"] for e in s["training"]["evals"] if e["step"] == step)


def next_to_paper(s):
    """The paper's findings beside what this run measured; a finding agrees only where an interval
    says so."""
    heads = s["model"]["layers"] * s["model"]["heads"]
    moved = [c for c in s["single"] if c["verdict"] != "level"]
    keep_level = [k for k in s["keep_one"] if k["verdict"] == "level" or k["low"] > 0]
    kept, lost = level_until(s["profile"])
    verdicts = importance_verdicts(s["profile"])
    beats, loses = verdicts.get("importance beats random", []), verdicts.get("random beats importance", [])
    kept_fraction = kept["fraction"] if kept else 0.0
    cross = s["cross_data"]
    first, last = s["over_training"][0], s["over_training"][-1]
    a, b = first["rows"][-1]["change"], last["rows"][-1]["change"]
    early = ("yes" if a["high"] < b["low"] else "no: the earliest checkpoint loses less" if a["low"] > b["high"]
             else "not shown (the intervals overlap)")
    return [
        "| finding of Michel et al. | here (test examples, 95% intervals) | agree? |",
        "|---|---|---|",
        f"| Most heads can be removed individually with little or no effect | {len(moved)} of {heads} heads move test "
        f"accuracy beyond its interval when masked alone | {'yes' if len(moved) <= heads // 4 else 'no'} |",
        f"| In some layers one head suffices | the most important head kept alone: level with (or above) the "
        f"unpruned model in {len(keep_level)} of {len(s['keep_one'])} layers | {'yes' if keep_level else 'no'} |",
        f"| 20–40% of heads prunable without noticeable loss | by importance, level with the unpruned model up to "
        f"{100 * kept_fraction:.0f}% of the heads" + (f"; the first loss beyond its interval at "
                                                       f"{100 * lost['fraction']:.0f}%" if lost else "; no step loses beyond its interval")
        + f" | {'yes' if kept_fraction >= 0.2 else 'no'} |",
        f"| Pruning by importance beats random order | importance beats the {s['random_orders']} random orders at "
        f"{', '.join(beats) or 'no step'}; random beats importance at {', '.join(loses) or 'no step'}; level "
        f"elsewhere | {'yes where they differ' if beats and not loses else 'mixed' if beats else 'not shown (level)' if not loses else 'no'} |",
        f"| Importance is stable across data | Pearson {cross['pearson']:.2f} / Spearman {cross['spearman']:.2f} "
        f"between the importance of the validation examples and of {s['data']['other']['examples']} examples of "
        f"{s['data']['other']['words']} words (one pair of maps, no interval) | — |",
        f"| Early in training every head matters; the important ones emerge early | at the last profile step "
        f"({first['rows'][-1]['pruned']} heads pruned by each checkpoint's own importance): step {first['step']} "
        f"(validation accuracy {acc(first_eval(s, first['step']))}) {change(a)} points, step {last['step']} {change(b)} | {early} |",
    ]


def markdown(s):
    d, m, t, c = s["data"], s["model"], s["training"], s["costs"]
    heads = m["layers"] * m["heads"]
    exact = {r["pruned"]: r for r in s["exact"]}
    out = [BEGIN, "", "Generated by `bench/classifier_heads_results.py` from a run of `scripts/heads_experiment.sh` "
           "(numbers in `docs/classifier-heads.json`); do not edit by hand.", "",
           f"*Data and model.* No pre-trained BERT can be downloaded here, so the model is a random-init BERT "
           f"({m['layers']} layers, {m['heads']} heads, hidden {m['hidden']}, feed-forward {m['intermediate']}, "
           f"WordPiece vocabulary of {m['vocabulary']} tokens) made and saved by Hugging Face transformers, then "
           f"fine-tuned by `attnkit train --init` on a synthetic sentiment task (label = more positive than "
           f"negative words among {d['train']['words']}; generated: {d['train']['examples']:,} training, "
           f"{d['val']['examples']} validation and {d['test']['examples']:,} test examples, another seed each). "
           f"Validation accuracy at each evaluation: "
           + ", ".join(f"step {e['step']} {acc(e['accuracy'])}" for e in t["evals"])
           + f"; the checkpoint kept is the best by validation accuracy, step {t['best']['step']}. Its test "
           f"score (`attnkit eval --checkpoint best --split test --examples 0`): `{s['test_scores']}`.", "",
           f"*Heads.* `{c['heads']['command']}`: importance, the head kept per layer and the pruning orders from "
           f"the validation examples, every number below on the {d['test']['examples']:,} test examples. Unpruned "
           f"test accuracy {acc(s['baseline']['score'])} [{acc(s['baseline']['low'])}, {acc(s['baseline']['high'])}]. "
           f"Intervals: 95% paired bootstrap over the test examples ({s['bootstrap_samples']} resamples) against "
           "the unpruned model, in accuracy points; \"level\" where the interval touches 0. Cost on "
           f"{s['machine']} ({s['date']}, 2 threads): training {c['train']['cpu_s']:.0f} CPU s, the analysis "
           f"{c['heads']['cpu_s']:.0f} CPU s ({c['heads']['wall_s']:.0f} s wall, peak {c['heads']['peak_mib']:.0f} MiB), "
           f"the --exact profile {c['exact']['cpu_s']:.0f} CPU s, the profiles over training "
           f"{c['over-training']['cpu_s']:.0f} CPU s.", "",
           "Head importance on the validation examples (per token |Σ ctx·∂L/∂ctx|, per-layer L2-normalised):", "",
           "| layer | " + " | ".join(f"h{h}" for h in range(m["heads"])) + " |",
           "|---" * (m["heads"] + 1) + "|"]
    for layer, row in enumerate(s["importance"]):
        out.append(f"| L{layer} | " + " | ".join(f"{x:.3f}" for x in row) + " |")
    moved = [x for x in s["single"] if x["verdict"] != "level"]
    worst = min(s["single"], key=lambda x: x["difference"])
    out += ["", f"*Each head masked alone*: {len(moved)} of {heads} heads move test accuracy beyond its interval"
            + (" (" + ", ".join(f"L{x['layer']} h{x['head']} {change({'score': x['difference'], 'low': x['low'], 'high': x['high']})}"
                                for x in moved) + ")" if moved else "")
            + f"; the largest drop: L{worst['layer']} h{worst['head']} "
            f"{change({'score': worst['difference'], 'low': worst['low'], 'high': worst['high']})} points.", "",
            "*Keeping one head per layer* (the head of highest validation importance kept, the layer's other heads "
            "masked):", "",
            "| layer | head kept | accuracy | change [95%] | verdict | range over the layer's heads kept alone |",
            "|---|---|---|---|---|---|"]
    for k in s["keep_one"]:
        out.append(f"| L{k['layer']} | h{k['head']} | {acc(k['accuracy'])} | {change(k)} | {k['verdict']} | "
                   f"{acc(k['all_heads_min'])}–{acc(k['all_heads_max'])} |")
    out += ["", f"*Global pruning, least important first* (at least one head kept per layer, so 100% asked = "
            f"{s['profile'][-1]['pruned']} of {heads} heads; {s['random_orders']} random orders beside it, their mean "
            "± sd over orders; importance − random by the two-stage bootstrap of this document's statistics "
            "section; the last two columns re-score the importance on the validation examples after each step, "
            "`--exact`):", "",
            "| pruned | accuracy, importance order | change [95%] | random orders: mean ± sd | reverse order | "
            "importance − random [95%] | verdict | --exact: accuracy | --exact: change [95%] |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in s["profile"]:
        e = exact.get(r["pruned"])
        rnd = r["random"]
        out.append(f"| {100 * r['fraction']:.0f}% ({r['pruned']}) | {acc(r['accuracy'])} | {change(r['change'])} | "
                   f"{acc(rnd['mean'])} ± {acc(rnd['sd'])} | {acc(r['reverse'])} | "
                   f"{change(r['importance_minus_random'])} | {r['verdict']} | "
                   + (f"{acc(e['accuracy'])} | {change(e['change'])} |" if e else "— | — |"))
    kept, lost = level_until(s["profile"])
    out += ["", (f"Pruning by importance stays level with the unpruned model up to {100 * kept['fraction']:.0f}% of "
                 f"the heads ({kept['pruned']}); the first step that loses accuracy beyond its interval is "
                 f"{100 * lost['fraction']:.0f}% ({lost['pruned']})." if kept and lost else
                 "No pruning step loses accuracy beyond its interval." if not lost else
                 "The first pruning step already loses accuracy beyond its interval."), ""]
    steps = [r["pruned"] for r in s["over_training"][0]["rows"]]
    out += [f"*Over training* (`{c['over-training']['command']}`: each kept checkpoint's own importance from the "
            "validation examples, its profile on the test examples; accuracy by importance order, change against "
            "that checkpoint unpruned [95%]):", "",
            "| checkpoint | unpruned | " + " | ".join(f"{p} heads pruned" for p in steps) + " |",
            "|---" * (len(steps) + 2) + "|"]
    for ck in s["over_training"]:
        out.append(f"| step {ck['step']} | {acc(ck['unpruned'])} | "
                   + " | ".join(f"{acc(r['accuracy'])} ({change(r['change'])})" for r in ck["rows"]) + " |")
    out += ["", "*Next to the paper*:", ""] + next_to_paper(s) + ["", END]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    results_driver_main(__doc__.split("\n\n")[0], "the OUT folder of scripts/heads_experiment.sh", JSON_PATH,
                        os.path.join(ROOT, "docs", "analysis.md"), BEGIN, END, markdown, summarize,
                        "classifier_heads_results")
