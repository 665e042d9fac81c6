#!/usr/bin/python3
"""Linearizing the Bible translation model (issue 45 part 4): the part of docs/analysis.md between
its bible-linearize markers, written from the finished cells of scripts/bible_linearize.sh, and
its numbers in docs/bible-linearize.json.

    bash scripts/bible_linearize.sh build runs/bible-clean KIND SITES 400   # one cell, ~25 CPU min
    /usr/bin/python3 bench/bible_linearize_results.py --run runs/bible-clean --build build
    /usr/bin/python3 bench/bible_linearize_results.py --report-only         # re-render from the JSON

Each cell's student and the softmax teacher decode every test verse greedily (`attnkit generate`
of the run's best checkpoint, sources cut to task.truncate as `attnkit eval` cuts them; the
hypotheses are kept beside the cell), and `attnkit bleu --paired-bs` gives the student's BLEU
difference from the teacher with sacreBLEU's paired bootstrap (1,000 resamples): the verdict is
"level" unless the interval excludes 0. Checkpoints were chosen on validation verses; every number
reported is on the test verses. The markdown is rendered from the JSON alone
(tests/python/test_docs_tables.py checks the doc against markdown(json))."""
import argparse
import datetime
import json
import os
import statistics
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bible_heads_results import SITES as SITE_NAMES, read_settings, training_summary  # noqa: E402
from bench_process import run_or_exit  # noqa: E402
from gnu_time import machine, read_gnu_time, replace_region, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- bible-linearize:begin -->", "<!-- bible-linearize:end -->"
JSON_PATH = os.path.join(ROOT, "docs", "bible-linearize.json")


def test_scores(path):
    """BLEU and chrF2 (fractions) of an `attnkit eval` line: "step N split test bleu=... chrf=..."."""
    fields = dict(part.split("=", 1) for part in open(path).read().split() if "=" in part)
    return float(fields["bleu"]), float(fields["chrf"])


def hypotheses(build, run_dir, sources, out, truncate, max_new, batch):
    """The best checkpoint of run_dir decoded greedily on every source, `batch` sources at a time in
    file order as `attnkit eval` decodes them (a cosFormer model's outputs depend on the padding of
    its batch), kept in `out` (made once)."""
    if not os.path.exists(out):
        text = run_or_exit([os.path.join(build, "attnkit"), "--threads", "1", "--quiet", "generate", "--model",
                            run_dir, "--sources", sources, "--max-input-length", str(truncate), "--max-new-tokens",
                            str(max_new), "--batch-size", str(batch)], "bible_linearize_results")
        with open(out + ".tmp", "w") as f:
            f.write(text)
        os.replace(out + ".tmp", out)
    return out


def paired(build, hyp, baseline, ref, out):
    """attnkit bleu --paired-bs's JSON of hyp against baseline (made once)."""
    if not os.path.exists(out):
        run_or_exit([os.path.join(build, "attnkit"), "bleu", "--hyp", hyp, "--ref", ref, "--paired-bs", baseline,
                     "--json", out + ".tmp"], "bible_linearize_results")
        os.replace(out + ".tmp", out)
    return json.load(open(out))


def validation_curve(run):
    """(step, validation BLEU) of every evaluation of the run (task.eval_examples verses)."""
    out = []
    for line in open(os.path.join(run, "metrics.jsonl")):
        d = json.loads(line)
        if "eval" in d:
            out.append([d["step"], d["eval"]["bleu"]])
    return out


def summarize(bible, build):
    settings = read_settings(os.path.join(bible, "run"))
    truncate = int(settings["task.truncate"])
    max_new = truncate - 1  # the task's decoding limit for `truncate` decoder positions
    batch = int(settings["task.batch_size"])
    work = os.path.join(bible, "linearize")
    sources, ref = os.path.join(work, "test-src.txt"), os.path.join(work, "test-ref.txt")
    test = os.path.join(bible, "split", "test.tsv")
    for path, column in ((sources, 0), (ref, 1)):
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as f:
                for line in open(test):
                    f.write(line.rstrip("\n").split("\t")[column] + "\n")
            os.replace(path + ".tmp", path)
    teacher_hyp = hypotheses(build, os.path.join(bible, "run"), sources, os.path.join(bible, "test-hyp.txt"),
                             truncate, max_new, batch)
    teacher_bleu, teacher_chrf = test_scores(os.path.join(bible, "test-scores.txt"))
    cells = []
    for name in sorted(os.listdir(work)):
        cell = os.path.join(work, name)
        if not os.path.exists(os.path.join(cell, "test-scores.txt")):
            continue  # not finished
        control = not os.path.exists(os.path.join(cell, "student", "transfer.json"))  # softmax-control
        transfer = ({"kind": "softmax", "layers": [], "trained": False} if control else
                    json.load(open(os.path.join(cell, "student", "transfer.json"))))
        bleu, chrf = test_scores(os.path.join(cell, "test-scores.txt"))
        hyp = hypotheses(build, os.path.join(cell, "run"), sources, os.path.join(cell, "test-hyp.txt"), truncate,
                         max_new, batch)
        p = paired(build, hyp, teacher_hyp, ref, os.path.join(cell, "paired-vs-teacher.json"))
        if abs(p["a"]["score"] - bleu) > 1e-4:  # generate and eval decode the same checkpoint alike
            sys.exit(f"bible_linearize_results: {name}: generate's BLEU {p['a']['score']:.5f} is not eval's {bleu:.5f}")
        sites = []
        for layer in transfer["layers"]:
            if layer["site"] not in sites:
                sites.append(layer["site"])
        stage1_cpu = 0.0 if control else read_gnu_time(os.path.join(cell, "linearize.time"))[0]
        stage2 = training_summary(os.path.join(cell, "run"))
        same = sum(a == b for a, b in zip(open(hyp).read().splitlines(), open(teacher_hyp).read().splitlines()))
        cells.append({
            "cell": name, "kind": transfer["kind"], "sites": sites, "layers": len(transfer["layers"]),
            "seed": int(read_settings(os.path.join(cell, "run")).get("run.seed", 0)),
            "lora_rank": int(read_settings(os.path.join(cell, "run")).get("lora.rank", 0)),
            "stage1": None if control else {
                "trained": transfer["trained"], "steps": transfer["steps"] if transfer["trained"] else 0,
                "held_out_before": transfer["total"]["initial"], "held_out_after": transfer["total"]["final"],
                "cpu_s": stage1_cpu},
            "stage2": {"steps": stage2["steps"], "best_step": stage2["best"]["step"] if stage2["best"] else None,
                       "cpu_s": read_gnu_time(os.path.join(cell, "train.time"))[0],
                       "validation_bleu": validation_curve(os.path.join(cell, "run"))},
            "test": {"bleu": bleu, "chrf": chrf, "identical_to_teacher": same},
            "vs_teacher": {"difference": p["difference"]["score"], "low": p["difference"]["low"],
                           "high": p["difference"]["high"], "p_value": p["p_value"], "verdict": p["verdict"]},
        })
    cells += kept_cells({c["cell"] for c in cells}, work, teacher_bleu)
    if not cells:
        sys.exit(f"bible_linearize_results: no finished cell under {work}: nothing to report (the docs are kept)")
    return {
        "generated": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "machine": machine(),
        "over_seeds": over_seeds(cells),
        "teacher": {"bleu": teacher_bleu, "chrf": teacher_chrf, "heads": int(settings["model.heads"]),
                    "layers": int(settings["model.layers"]), "hidden": int(settings["model.hidden"]),
                    "steps": training_summary(os.path.join(bible, "run"))["steps"]},
        "test_verses": sum(1 for _ in open(ref)), "truncate": truncate, "cells": cells,
    }


def kept_cells(found, work, teacher_bleu):
    """The cells of the docs/bible-linearize.json written before whose folders are not under `work`
    (run on another machine, whose runs/ did not come along), so that a later seed adds to them
    instead of replacing them. Only when that JSON's teacher is this one (same test BLEU); each kept
    cell says so ("kept_from": the date of the run that measured it)."""
    if not os.path.exists(JSON_PATH):
        return []
    before = json.load(open(JSON_PATH))
    if abs(before.get("teacher", {}).get("bleu", -1) - teacher_bleu) > 1e-9:
        return []
    kept = []
    for c in before.get("cells", []):
        if c["cell"] not in found and not os.path.exists(os.path.join(work, c["cell"])):
            kept.append(dict(c, kept_from=c.get("kept_from", before.get("generated", "an earlier run"))))
    return kept


def over_seeds(cells):
    """Per (kind, sites) run with more than one seed: the seeds, the mean and sample sd of student −
    teacher over them, and how many seeds' paired intervals say worse / level / better."""
    groups = {}
    for c in cells:
        groups.setdefault((c["kind"], tuple(c["sites"]), c.get("lora_rank", 0)), []).append(c)
    out = []
    for (kind, sites, lora), runs in sorted(groups.items(), key=lambda g: (g[0][0], len(g[0][1]) < 3, g[0][1], g[0][2])):
        if len(runs) < 2:
            continue
        runs.sort(key=lambda c: c["seed"])
        d = [c["vs_teacher"]["difference"] for c in runs]
        verdicts = ["level" if c["vs_teacher"]["verdict"] == "level" else "worse"
                    if c["vs_teacher"]["difference"] < 0 else "better" for c in runs]
        out.append({"kind": kind, "sites": list(sites), "lora_rank": lora, "seeds": [c["seed"] for c in runs],
                    "differences": d, "mean": statistics.mean(d), "sd": statistics.stdev(d),
                    "test_bleu": [c["test"]["bleu"] for c in runs],
                    "verdicts": {v: verdicts.count(v) for v in ("worse", "level", "better") if v in verdicts}})
    return out


def site_text(sites):
    return ("none: the teacher fine-tuned alike (control)" if not sites else "all three"
            if len(sites) == 3 else ", ".join(SITE_NAMES.get(x, x) for x in sites))


def lora_text(rank):
    """A low-rank stage 2's mark in the sites column (scripts/bible_linearize.sh LORA)."""
    return f", stage 2 LoRA rank {rank} (lr 1e-3)" if rank else ""


def bleu(x):
    return f"{100 * x:.2f}"


def signed(x):
    return f"{100 * x:+.2f}"


def minutes(s):
    return f"{s / 60:.1f}"


def markdown(s):
    t = s["teacher"]
    lines = [BEGIN, "",
             f"Teacher: the softmax encoder-decoder of `scripts/bible_heads.sh` ({t['layers']} + {t['layers']} layers, "
             f"hidden {t['hidden']}, {t['heads']} heads per site, {t['steps']:,} steps; its best checkpoint by "
             f"validation BLEU), test BLEU {bleu(t['bleu'])}, chrF2 {bleu(t['chrf'])} on all {s['test_verses']:,} "
             "test verses. Each student: `bash scripts/bible_linearize.sh BUILD runs/bible-clean KIND SITES 400` "
             "(stage 1 = attention transfer of the feature maps, 300 steps of 16 training pairs, held-out loss "
             "on the 316 validation pairs summed over the converted layers; stage 2 = 400 steps of 32 pairs, "
             "every weight, lr 2e-4 cosine; the best checkpoint by validation BLEU on 100 verses), one run per row "
             f"(seed 0 unless the row names another), one thread each ({s['machine']}; CPU minutes are those of the build each row ran on: rows without a date ran on a later build than the dated ones). Student − teacher: sacreBLEU's paired bootstrap on the test verses "
             "(1,000 resamples, 95%); \"level\" where the interval covers 0. Generated "
             f"{s['generated']} by `bench/bible_linearize_results.py`.", "",
             "| kind | sites converted (layers) | stage 1 held-out loss | stage 1 CPU min | stage 2 CPU min "
             "| validation BLEU at 100 / 200 / 300 / 400 steps | test BLEU | chrF2 | BLEU kept | student − teacher "
             "[95%] | verdict | test translations = teacher's |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(s["cells"], key=lambda c: (c["stage1"] is not None, c["kind"], len(c["sites"]) < 3, c["sites"],
                                               c.get("seed", 0))):
        sites = site_text(c["sites"])
        layers = ((f" ({c['layers']})" if c["sites"] else "") + lora_text(c.get("lora_rank", 0))
                  + (f", seed {c['seed']}" if c.get("seed") else "")
                  + (f"; measured {c['kept_from']}" if c.get("kept_from") else ""))
        st1 = c["stage1"] or {"cpu_s": 0.0}
        loss = ("—" if c["stage1"] is None else f"{st1['held_out_before']:.3f} → {st1['held_out_after']:.3f}"
                if st1["trained"] else f"{st1['held_out_before']:.3f} (no map to train)")
        curve = " / ".join(bleu(b) for _, b in c["stage2"]["validation_bleu"])
        v = c["vs_teacher"]
        lines.append(
            f"| `{c['kind']}` | {sites}{layers} | {loss} | {minutes(st1['cpu_s'])} | "
            f"{minutes(c['stage2']['cpu_s'])} | {curve} | {bleu(c['test']['bleu'])} | {bleu(c['test']['chrf'])} | "
            f"{100 * c['test']['bleu'] / t['bleu']:.0f}% | {signed(v['difference'])} [{signed(v['low'])}, "
            f"{signed(v['high'])}] | {'level' if v['verdict'] == 'level' else 'worse' if v['difference'] < 0 else 'better'} | "
            f"{c['test']['identical_to_teacher']} of {s['test_verses']:,} |")
    groups = s.get("over_seeds", [])
    if groups:
        lines += ["", "Over training seeds (the rows above with more than one seed): student − teacher's mean and "
                  "sample standard deviation over the seeds, and each seed's verdict.", "",
                  "| kind | sites converted | seeds | test BLEU per seed | student − teacher, mean ± sd | "
                  "seeds' verdicts |", "|---|---|---|---|---|---|"]
        for g in groups:
            verdicts = ", ".join(f"{n} {v}" for v, n in g["verdicts"].items())
            lines.append(f"| `{g['kind']}` | {site_text(g['sites'])}{lora_text(g.get('lora_rank', 0))} | "
                         f"{', '.join(str(x) for x in g['seeds'])} | "
                         f"{' / '.join(bleu(b) for b in g['test_bleu'])} | {signed(g['mean'])} ± "
                         f"{100 * g['sd']:.2f} | {verdicts} |")
    lines += ["", END, ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", help="the OUT folder of scripts/bible_heads.sh whose linearize/ holds the cells")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build with attnkit (default: build)")
    p.add_argument("--report-only", action="store_true", help="re-render docs from docs/bible-linearize.json")
    args = p.parse_args()
    if args.report_only:
        if not os.path.exists(JSON_PATH):
            sys.exit("bible_linearize_results: --report-only renders docs/bible-linearize.json, which no run has "
                     "written yet")
        summary = json.load(open(JSON_PATH))
    elif args.run:
        summary = summarize(args.run, args.build)
        write_json(JSON_PATH, summary)
    else:
        p.error("--run (or --report-only)")
    replace_region(os.path.join(ROOT, "docs", "analysis.md"), BEGIN, END, markdown(summary))
    print("bible_linearize_results.py: wrote " + ("" if args.report_only else "docs/bible-linearize.json and ")
          + "docs/analysis.md")


if __name__ == "__main__":
    main()
