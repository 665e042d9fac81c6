#!/usr/bin/python3
"""Fine-tuning by seeds (issue 44: ALBERT shared vs un-shared was 75.0 vs 72.5 % on 240 test
passages, one run each; pretrained vs from scratch likewise): each study pretrains its model once
with bench/pretrain_results.py's cell (600 CPU s of MLM steps, one thread), fine-tunes both of its
arms with the same pretraining cells' flags for each seed (180 CPU s each; another seed = another
classification-head initialisation, data order and dropout from the same pretrained start), scores
each arm's last checkpoint on every test passage with per-passage items (`attnkit eval --split
test --examples 0 --items`), and compares the arms seed by seed by `attnkit compare` (sacreBLEU's
paired bootstrap of accuracy over the passages, 1,000 resamples, 95%; "level" unless the interval
excludes 0).

    /usr/bin/python3 bench/finetune_seeds.py [--build build] [--studies albert] [--seeds 0,1,2] [--nice 10]
    /usr/bin/python3 bench/finetune_seeds.py --report-only      # re-render the docs from the JSON

Studies: albert (un-shared vs shared layers, from one ALBERT MLM pretraining), pretrained-KIND for
KIND in softmax, cosformer, linear-relu, linear-elu (MLM-pretrained vs from scratch). Cells run in
runs/finetune-seeds-b600-f180/CELL, one at a time, niced; a finished cell is recorded in
docs/cells/finetune-seeds-b600-f180/CELL.json (kept in git: runs/ lives on one machine) and never
trained again. All fine-tuning cells of a study start from one pretraining: when its record exists
but its checkpoint is not on this machine, the study's remaining cells are refused (delete the
study's records to run it again). docs/finetune-seeds.json and the finetune-seeds region of
docs/results.md are written from the records of every study whose cells are all recorded; a study
whose runs shared their core (CPU seconds per wall second under 0.9: a CPU second there buys fewer
steps) says which. Run the studies on an otherwise idle machine, at most one per core.
"""
import argparse
import datetime
import os
import sys
import types

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain_results as pr  # noqa: E402
from bench_process import compare_items, mean_sd  # noqa: E402
from gnu_time import (add_store_and_docs_arguments, cpu_share, machine, render_from_json, replace_region,  # noqa: E402
                      shared_runs, write_json)

ROOT = pr.ROOT
STUDIES = {"albert": {"title": "ALBERT: un-shared vs shared layers", "pretrain": "mlm-albert",
                      "arms": (("unshared", "ft-albert-unshared"), ("shared", "ft-albert-shared"))}}
for _kind in pr.KINDS:
    STUDIES[f"pretrained-{pr.slug(_kind)}"] = {
        "title": f"{_kind}: MLM-pretrained vs from scratch", "pretrain": f"mlm-{pr.slug(_kind)}",
        "arms": (("pretrained", f"ft-{pr.slug(_kind)}-pretrained"), ("scratch", f"ft-{pr.slug(_kind)}-scratch"))}
BEGIN, END = "<!-- finetune-seeds:begin -->", "<!-- finetune-seeds:end -->"


def cells_of(study, seeds):
    return [pr.seeded(cell, seed) for seed in seeds for _, cell in STUDIES[study]["arms"]]


def fill(args, attnkit, study, seeds):
    """Trains and records the study's cells that are not recorded yet."""
    todo = [c for c in cells_of(study, seeds) if not pr.load(args, c)]
    if not todo:
        return
    pretrain = STUDIES[study]["pretrain"]
    if pr.load(args, pretrain) and not os.path.isdir(os.path.join(pr.cell_dir(args, pretrain), "checkpoints")):
        sys.exit(f"finetune_seeds: study {study}: {pretrain} is recorded but its checkpoint is not on this machine, and "
                 f"every fine-tuning cell of the study starts from that one pretraining; delete the study's records in "
                 f"{os.path.dirname(pr.store_path(args, pretrain))} to run it again")
    for cell in [pretrain, *todo]:
        if not pr.load(args, cell):
            pr.run_cell(args, attnkit, cell)
        if "failed" in pr.load(args, cell):
            sys.exit(f"finetune_seeds: {cell} failed: {pr.load(args, cell)['failed']}")


def summarize(args, studies, seeds):
    out = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "seeds": seeds,
           "budget_cpu_s": args.budget, "finetune_budget_cpu_s": args.finetune_budget,
           "smoke": args.budget < pr.SMOKE_BUDGET, "studies": {}}
    machines = set()
    for study in studies:
        spec = STUDIES[study]
        pretrain = pr.load(args, spec["pretrain"])
        machines.add(pretrain.get("machine", "?"))
        arms, comparisons = {}, []
        for arm, cell in spec["arms"]:
            rows = []
            for seed in seeds:
                r = pr.load(args, pr.seeded(cell, seed))
                machines.add(r.get("machine", "?"))
                rows.append({"seed": seed, "test_accuracy": r["test"]["accuracy"], "steps": r["steps"],
                             "train_cpu_s": r["train_cpu_s"], "cpu_share": cpu_share(r),
                             "items": r["test_items"]["items"]})
            arms[arm] = rows
        (a_arm, a_cell), (b_arm, b_cell) = spec["arms"]
        for seed in seeds:
            items = [pr.load(args, pr.seeded(cell, seed))["test_items"] for cell in (a_cell, b_cell)]
            p = compare_items(os.path.dirname(args.attnkit), *items, "finetune_seeds")
            comparisons.append({"seed": seed, **{k: p[k] for k in ("difference", "low", "high", "verdict")}})
        out["studies"][study] = {"title": spec["title"], "a": a_arm, "b": b_arm, "arms": arms,
                                 "pretrain": {"cell": spec["pretrain"], "steps": pretrain["steps"],
                                              "cpu_share": cpu_share(pretrain),
                                              "validation_perplexity": (pretrain.get("final_eval") or {}).get("perplexity")},
                                 "comparisons": comparisons}
    out["machine"] = "; ".join(sorted(machines))
    return out


def markdown(s):
    lines = [BEGIN, "", "## Fine-tuning by seeds", ""]
    if s["smoke"]:
        lines += [f"**SMOKE RUN ({s['budget_cpu_s']:g} CPU s per pretraining): a check of the pipeline only.**", ""]
    lines += [
             f"Generated {s['date']} by `bench/finetune_seeds.py` (machine: {s['machine']}). Each study pretrains its "
             f"model once as in the section above ({s['budget_cpu_s']:g} CPU s of MLM steps, one thread), then "
             f"fine-tunes each arm on the fortune-category task for {s['finetune_budget_cpu_s']:g} CPU s per seed "
             f"(seeds {', '.join(map(str, s['seeds']))}: the same pretrained start; another classification-head "
             "initialisation, data order and dropout). Test accuracy of each run's last checkpoint on every test "
             "passage; the arms compared seed by seed on the same passages by the paired bootstrap of accuracy "
             "(`attnkit compare` of the runs' `eval --items`, 1,000 resamples, 95%): \"level\" unless the interval "
             "excludes 0. The seeds measure the fine-tuning's spread, not the pretraining's (one pretraining per "
             "study).", ""]
    for study in s["studies"].values():
        a, b = study["a"], study["b"]
        lines += [f"### {study['title']}", "",
                  f"Pretraining: {study['pretrain']['cell']}, {study['pretrain']['steps']:,} steps"
                  + (f", validation perplexity {study['pretrain']['validation_perplexity']:.1f}"
                     if study['pretrain']['validation_perplexity'] else "") + ".", ""]
        shared = shared_runs({study["pretrain"]["cell"]: study["pretrain"].get("cpu_share"),
                              **{f"{arm} seed {r['seed']}": r.get("cpu_share")
                                 for arm in (a, b) for r in study["arms"][arm]}})
        if shared:
            lines += [f"These runs shared their core (CPU seconds per wall second: {shared}; about 1 on a core of "
                      "their own): a CPU second there can buy fewer steps than on an idle machine.", ""]
        lines += ["| arm | test accuracy per seed | mean ± sd | steps per seed |", "|---|---|---|---|"]
        for arm in (a, b):
            rows = study["arms"][arm]
            m, sd = mean_sd([r["test_accuracy"] for r in rows])
            accuracies = " / ".join(f"{100 * r['test_accuracy']:.1f}%" for r in rows)
            steps = " / ".join(str(r["steps"]) for r in rows)
            lines.append(f"| {arm} | {accuracies} | {100 * m:.1f} ± {100 * sd:.1f}% | {steps} |")
        rows = study["comparisons"]
        m, sd = mean_sd([c["difference"] for c in rows])
        verdict = lambda c: "level" if c["verdict"] == "level" else f"{a if c['verdict'] == 'a' else b} better"  # noqa: E731
        lines += ["", f"| {a} − {b} | per seed: difference [95%], verdict | mean ± sd over seeds |", "|---|---|---|",
                  "| test accuracy | " + "; ".join(f"seed {c['seed']}: {100 * c['difference']:+.1f} "
                                                   f"[{100 * c['low']:+.1f}, {100 * c['high']:+.1f}] {verdict(c)}"
                                                   for c in rows) + f" | {100 * m:+.1f} ± {100 * sd:.1f} points |", ""]
    lines.append(END)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--studies", default="albert", help=f"comma-separated, of: {', '.join(STUDIES)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--budget", type=float, default=pr.DEFAULT_BUDGETS[0], help="CPU s of MLM steps per pretraining")
    ap.add_argument("--finetune-budget", type=float, default=pr.DEFAULT_BUDGETS[1], help="CPU s per fine-tuning cell")
    add_store_and_docs_arguments(ap, ROOT, "finetune-seeds.json", "finetune-seeds-bB-fF/CELL.json")
    a = ap.parse_args()
    doc, json_path = os.path.join(a.docs, "results.md"), os.path.join(a.docs, "finetune-seeds.json")
    if a.report_only:
        render_from_json(json_path, doc, BEGIN, END, markdown, "finetune_seeds")
        return
    studies = a.studies.split(",")
    unknown = [st for st in studies if st not in STUDIES]
    if unknown:
        sys.exit(f"finetune_seeds: unknown study {unknown[0]} (the studies: {', '.join(STUDIES)})")
    seeds = [int(x) for x in a.seeds.split(",")]
    os.chdir(ROOT)
    attnkit = os.path.abspath(os.path.join(a.build, "attnkit"))
    if not os.access(attnkit, os.X_OK):
        sys.exit(f"finetune_seeds: {attnkit} not found (make build, or --build DIR)")
    smoke = a.budget < pr.SMOKE_BUDGET
    if smoke and os.path.abspath(a.docs) == os.path.join(ROOT, "docs"):
        sys.exit(f"finetune_seeds: a budget under {pr.SMOKE_BUDGET} CPU s is a smoke run; give --docs and --store "
                 "outside docs/")
    args = types.SimpleNamespace(runs=os.path.join("runs", f"finetune-seeds-b{a.budget:g}-f{a.finetune_budget:g}"),
                                 budget=a.budget, finetune_budget=a.finetune_budget, nice=a.nice,
                                 store=None if smoke and os.path.abspath(a.store).startswith(os.path.join(ROOT, "docs"))
                                 else a.store, attnkit=attnkit)
    pr.make_data(attnkit)
    for study in studies:
        fill(args, attnkit, study, seeds)
    done = [st for st in STUDIES if all(pr.load(args, c) for c in cells_of(st, seeds) + [STUDIES[st]["pretrain"]])]
    summary = summarize(args, done, seeds)
    write_json(json_path, summary)
    replace_region(doc, BEGIN, END, markdown(summary))
    print(f"finetune_seeds.py: wrote {json_path} and {doc} ({', '.join(done)})")


if __name__ == "__main__":
    main()
