#!/usr/bin/python3
"""Pretraining experiments of issue 32 at an equal CPU budget per cell: masked-LM pretraining per
attention kind (cosFormer's Figure 4), fine-tuning from those checkpoints against training from
scratch, the permutation LM next to the causal LM and MLM, ALBERT un-sharing, key_size, the
conditional LM, and rank collapse of the pretrained checkpoints.

    /usr/bin/python3 bench/pretrain_results.py [--build build] [--budget 600] [--finetune-budget 180]
                                               [--experiments a b c d e] [--kinds K1,K2] [--cells N]
                                               [--report-only] [--docs docs] [--store docs/cells]

Experiments (each runs on its own; the cells it needs from another experiment run first):
  a  MLM pretraining of one BERT-mini-shaped model per attention kind (softmax, cosformer,
     linear:relu = cosFormer without its re-weighting, linear:elu): loss against steps and against
     CPU seconds, validation perplexity at the equal budget.
  b  each checkpoint of (a) fine-tuned (`train --init`) on fortune-category classification, next to
     the same model trained from scratch with the same budget: test accuracy.
  c  plm (one stream, two streams) next to lm and the mlm of (a): loss curves, a cloze and
     generation samples.
  d  ALBERT (MLM-pretrained) fine-tuned shared vs un-shared (`model.unshare`); key_size = hidden /
     heads vs a larger key_size at the same head count (MLM); a conditional LM (Conditional
     LayerNorm) on the labelled passages, samples per class scored by the classifier of (b).
  e  rank collapse (`attnkit analyze collapse`) of each checkpoint of (a) beside random stacks of
     the same shape.

Each cell is `attnkit --threads 1 train ... --run.cpu_budget B` under `/usr/bin/time -v`, niced, in
runs/pretrain-bBUDGET-fFINETUNE/CELL. The budget counts the CPU time of the training steps only
(evaluations and checkpoints do not count; run.cpu_budget in docs/training.md). A finished cell has
result.json and never runs again; an interrupted one resumes from its newest checkpoint. A finished
cell is also recorded in STORE/pretrain-bBUDGET-fFINETUNE/CELL.json (kept in git: runs/ lives on one
machine), and a recorded cell is not trained again on another machine (a cell that starts from a
recorded cell's checkpoint needs that checkpoint here). Afterwards DOCS/pretrain-results.json, the
plots DOCS/images/pretrain-*.svg and the part of DOCS/results.md between the pretrain-results
markers are rewritten; at budgets other than 600 / 180 the study has its own:
DOCS/pretrain-results-bB-fF.json, images/pretrain-bB-fF-*.svg and a region of its own (appended
to results.md the first time). A budget under 60 CPU s is a smoke run (the pipeline only): its
report says so, and it is refused for the repository's docs/.

Data (made once under data/pretrain/ from Debian's fortunes; nothing is downloaded):
  corpus/     `attnkit data corpus` of the 38 English fortune files other than the four
              classification categories (so the pretraining text holds none of the labelled text)
  wordpiece/  an 8,000-token WordPiece vocabulary trained on corpus/train.txt
  classify/   `attnkit data lra-text --min-bytes 100 --max-bytes 400` (passages of consecutive
              fortunes of one file: computers, people, science, songs-poems; split by fortune),
              rewritten as `text<TAB>label` for the classification task
"""
import argparse
import datetime
import json
import os
import re
import shutil
import struct
import subprocess
import sys

from gnu_time import cpu_share, machine, read_run_times, render_from_json, replace_region, shared_runs, write_json
from bench_process import compare_items

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "data/pretrain"
CORPUS = f"{DATA}/corpus"
TOKENIZER = f"{DATA}/wordpiece"
CLASSIFY = f"{DATA}/classify"
VOCAB = 8000
CATEGORIES = ["computers", "people", "science", "songs-poems"]
KINDS = ["softmax", "cosformer", "linear:relu", "linear:elu"]
# The model of every cell (BERT-mini's shape): 4 layers, hidden 256, 4 heads, feed-forward 1024.
SIZE = {"layers": 4, "hidden": 256, "heads": 4, "intermediate": 1024}
MODEL = ["--model.layers", "4", "--model.hidden", "256", "--model.heads", "4", "--model.intermediate", "1024",
         "--model.dropout", "0.1"]
TRUNCATE = 128
OPTIM = ["--optimizer.name", "adamw", "--optimizer.weight_decay", "0.01", "--schedule.kind", "cosine",
         "--run.clip_norm", "1.0", "--run.steps", "1000000", "--run.keep_last", "1"]
PRETRAIN_DATA = ["--task.data", f"{CORPUS}/train.txt", "--task.tokenizer", TOKENIZER,
                 "--task.truncate", str(TRUNCATE), "--task.batch_size", "16", "--task.eval_examples", "200"]
CLASSIFY_DATA = ["--task.name", "classification", "--task.data", f"{CLASSIFY}/train.tsv", "--task.tokenizer",
                 TOKENIZER, "--task.truncate", str(TRUNCATE), "--task.batch_size", "16", "--task.eval_examples", "0"]
PRETRAIN_LR, FINETUNE_LR = "5e-4", "3e-4"
PREDICT_LAST = 20  # plm: the last 20 of 128 tokens of each order are targets (MLM masks 15%, 19)
KEY_HEADS, KEY_LARGE = 16, 64  # key_size experiment: 16 heads, key_size 16 (= 256 / 16) vs 64
CLOZE_SENTENCES, CLOZE_MASKS = 4, 2
GENERATION_PROMPTS = ["The computer", "Love is", "A wise man"]
CONDITIONAL_SAMPLES = 50  # per class (smoke runs: 4)
COLLAPSE = {"samples": 8, "seq_len": 128, "seeds": 3}
DEFAULT_BUDGETS = (600, 180)  # the budgets of docs/results.md's main pretraining section
EXPERIMENTS = ["a", "b", "c", "d", "e"]
SMOKE_BUDGET = 60


def study(budget, finetune_budget):
    """The suffix of a study's docs (JSON, region markers, plots): none at the default budgets,
    "-bB-fF" at others, so that a study at another budget has a section of its own."""
    return "" if (budget, finetune_budget) == DEFAULT_BUDGETS else f"-b{budget:g}-f{finetune_budget:g}"


def markers(budget, finetune_budget):
    name = "pretrain-results" + study(budget, finetune_budget)
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def summary_name(budget, finetune_budget):
    """The study's JSON in docs/."""
    return f"pretrain-results{study(budget, finetune_budget)}.json"


BEGIN, END = markers(*DEFAULT_BUDGETS)


def log(message):
    print(f"pretrain_results: {message}", file=sys.stderr, flush=True)


def slug(kind):
    return kind.replace(":", "-")


def env1():
    return dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


# ------------------------------------------------------------------------------------------------
# Data


def make_data(attnkit):
    fortunes = "/usr/share/games/fortunes"
    if not os.path.isfile(f"{CORPUS}/train.txt"):
        skip = set(CATEGORIES) | {"chinese", "tang300", "song100", "ascii-art"}
        files = sorted(os.path.join(fortunes, f) for f in os.listdir(fortunes)
                       if "." not in f and f not in skip and os.path.isfile(os.path.join(fortunes, f)))
        log(f"making {CORPUS} from {len(files)} fortune files")
        subprocess.run([attnkit, "--quiet", "data", "corpus", *files, "--format", "fortune", "--out", CORPUS],
                       check=True)
    if not os.path.isfile(f"{TOKENIZER}/vocab.txt"):
        log(f"training {TOKENIZER}")
        subprocess.run([attnkit, "--quiet", "tokenizer", "train", "--kind", "wordpiece", "--vocab-size", str(VOCAB),
                        "--out", TOKENIZER, f"{CORPUS}/train.txt"], check=True, stdout=subprocess.DEVNULL)
    if not os.path.isfile(f"{CLASSIFY}/test.tsv"):
        raw = f"{DATA}/lra-text"
        log(f"making {CLASSIFY}")
        subprocess.run([attnkit, "--quiet", "data", "lra-text", "--out", raw, "--categories", ",".join(CATEGORIES),
                        "--min-bytes", "100", "--max-bytes", "400", "--seed", "0"], check=True)
        os.makedirs(CLASSIFY, exist_ok=True)
        for split, name in (("train", "train"), ("val", "val"), ("test", "test")):
            with open(f"{raw}/text_{split}.tsv") as f, open(f"{CLASSIFY}/{name}.tsv.tmp", "w") as out:
                for line in f:
                    label, text = line.rstrip("\n").split("\t", 1)
                    out.write(f"{plain_text(text)}\t{label}\n")
            os.replace(f"{CLASSIFY}/{name}.tsv.tmp", f"{CLASSIFY}/{name}.tsv")


def plain_text(escaped):
    """lra-text's escaped passage as one line: escaped newlines and tabs become spaces."""
    text = re.sub(r"\\(.)", lambda m: {"n": " ", "t": " ", "r": " ", "\\": "\\"}.get(m.group(1), m.group(1)),
                  escaped)
    return re.sub(r"\s+", " ", text).strip()


def vocab_ids():
    with open(f"{TOKENIZER}/vocab.txt") as f:
        return {token: i for i, token in enumerate(line.rstrip("\n") for line in f)}


# ------------------------------------------------------------------------------------------------
# Cells: name -> how to train it. Budgets: "pretrain" (--budget) or "finetune" (--finetune-budget).


def pretrain_cell(task, extra, experiment, label):
    return {"experiment": experiment, "label": label, "budget": "pretrain",
            "flags": ["--task.name", task, *PRETRAIN_DATA, *MODEL, "--optimizer.lr", PRETRAIN_LR, *extra]}


def cells():
    table = {}
    for kind in KINDS:
        table[f"mlm-{slug(kind)}"] = pretrain_cell("mlm", ["--model.attention", kind], "a", f"MLM, {kind}")
        table[f"ft-{slug(kind)}-pretrained"] = {
            "experiment": "b", "label": f"fine-tuned from mlm-{slug(kind)}", "budget": "finetune",
            "init": f"mlm-{slug(kind)}", "test": True,
            "flags": [*CLASSIFY_DATA, "--optimizer.lr", FINETUNE_LR]}
        table[f"ft-{slug(kind)}-scratch"] = {
            "experiment": "b", "label": f"from scratch, {kind}", "budget": "finetune", "test": True,
            "flags": [*CLASSIFY_DATA, *MODEL, "--model.attention", kind, "--optimizer.lr", FINETUNE_LR]}
    table["lm"] = pretrain_cell("lm", [], "c", "causal LM (gpt2 blocks)")
    table["plm-one-stream"] = pretrain_cell("plm", ["--task.predict_last", str(PREDICT_LAST)], "c",
                                            "permutation LM, one stream")
    table["plm-two-stream"] = pretrain_cell("plm", ["--task.predict_last", str(PREDICT_LAST), "--task.two_stream",
                                                    "true"], "c", "permutation LM, two streams")
    table["mlm-albert"] = pretrain_cell("mlm", ["--model.family", "albert"], "d", "MLM, ALBERT (shared layers)")
    for unshare in ("false", "true"):
        table[f"ft-albert-{'unshared' if unshare == 'true' else 'shared'}"] = {
            "experiment": "d", "label": f"ALBERT fine-tuned, unshare {unshare}", "budget": "finetune",
            "init": "mlm-albert", "test": True,
            "flags": [*CLASSIFY_DATA, "--optimizer.lr", FINETUNE_LR, "--model.unshare", unshare]}
    for key in (SIZE["hidden"] // KEY_HEADS, KEY_LARGE):
        extra = ["--model.heads", str(KEY_HEADS), "--model.key_size", str(key)]
        table[f"mlm-heads{KEY_HEADS}-key{key}"] = pretrain_cell("mlm", extra, "d", f"MLM, {KEY_HEADS} heads, key_size {key}")
    table["clm"] = {"experiment": "d", "label": "conditional LM (Conditional LayerNorm)", "budget": "pretrain",
                    "flags": ["--task.name", "conditional-lm", "--task.data", f"{CLASSIFY}/train.tsv", "--task.tokenizer",
                              TOKENIZER, "--task.truncate", str(TRUNCATE), "--task.batch_size", "16",
                              "--task.eval_examples", "0", *MODEL, "--optimizer.lr", PRETRAIN_LR]}
    return table


CELLS = cells()


def seeded(cell, seed):
    """The cell CELL trained with --run.seed SEED (a fine-tuning cell's other seeds: the same
    pretrained start, another head initialisation, data order and dropout); seed 0 is CELL itself.
    Registers the variant in CELLS and returns its name."""
    if seed == 0:
        return cell
    name = f"{cell}-seed{seed}"
    spec = CELLS[cell]
    CELLS[name] = dict(spec, label=f"{spec['label']}, seed {seed}", flags=[*spec["flags"], "--run.seed", str(seed)])
    return name
# What each experiment needs, in order (cells of other experiments included).
NEEDS = {
    "a": [f"mlm-{slug(k)}" for k in KINDS],
    "b": [c for k in KINDS for c in (f"mlm-{slug(k)}", f"ft-{slug(k)}-pretrained", f"ft-{slug(k)}-scratch")],
    "c": ["mlm-softmax", "lm", "plm-one-stream", "plm-two-stream"],
    "d": ["mlm-albert", "ft-albert-shared", "ft-albert-unshared", f"mlm-heads{KEY_HEADS}-key{SIZE['hidden'] // KEY_HEADS}",
          f"mlm-heads{KEY_HEADS}-key{KEY_LARGE}", "clm", "mlm-softmax", "ft-softmax-pretrained"],
    "e": [f"mlm-{slug(k)}" for k in KINDS],
}


def budget_of(args, cell):
    return args.budget if CELLS[cell]["budget"] == "pretrain" else args.finetune_budget


def cell_dir(args, cell):
    return os.path.join(args.runs, cell)


def schedule_flags(budget):
    """Logging, evaluation and warm-up scaled with the budget (600 CPU s: log every 5 steps,
    evaluate every 100, warm up 50)."""
    log_every = 5 if budget >= SMOKE_BUDGET else 1
    eval_every = max(4, int(budget / 6) // log_every * log_every)
    warmup = max(2, min(50, int(budget / 12)))
    return ["--run.log_every", str(log_every), "--run.eval_every", str(eval_every), "--run.checkpoint_every",
            str(eval_every), "--schedule.warmup", str(warmup)]


def newest_checkpoint(run):
    directory = os.path.join(run, "checkpoints")
    steps = sorted(d for d in os.listdir(directory) if re.fullmatch(r"step-\d+", d)) if os.path.isdir(directory) else []
    if not steps:
        sys.exit(f"pretrain_results: {directory} has no step checkpoint")
    return os.path.abspath(os.path.join(directory, steps[-1]))


def metrics(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def curves(records):
    """Training points [step, cpu_s, loss] and evaluation points [step, cpu_s, {metrics}]. An
    evaluation takes the CPU seconds of the training record of its step (log_every divides
    eval_every), else of the nearest earlier one."""
    train = [[r["step"], r["cpu_seconds"], r["loss"]] for r in records if "loss" in r and "cpu_seconds" in r]
    cpu_at = {s: c for s, c, _ in train}
    evals = []
    for r in records:
        if "eval" not in r:
            continue
        earlier = [s for s in cpu_at if s <= r["step"]]
        evals.append([r["step"], cpu_at[max(earlier)] if earlier else 0.0, r["eval"]])
    return train, evals


def run_cell(args, attnkit, cell):
    spec = CELLS[cell]
    budget = budget_of(args, cell)
    run = cell_dir(args, cell)
    resuming = os.path.isdir(os.path.join(run, "checkpoints")) and any(
        d.startswith("step-") for d in os.listdir(os.path.join(run, "checkpoints")))
    part = len([f for f in os.listdir(run) if f.startswith("time-")]) if os.path.isdir(run) else 0
    os.makedirs(run, exist_ok=True)
    timing = os.path.join(run, f"time-{part}.txt")
    base = ["nice", "-n", str(args.nice), "/usr/bin/time", "-v", "-o", timing, attnkit, "--threads", "1", "--quiet"]
    if resuming:
        command = [*base, "train", "--resume", run, "--run.cpu_budget", str(budget)]
    else:
        init = ["--model.init", newest_checkpoint(cell_dir(args, spec["init"]))] if "init" in spec else []
        command = [*base, "train", *spec["flags"], *init, *OPTIM, *schedule_flags(budget), "--run.dir", run,
                   "--run.cpu_budget", str(budget)]
    log(f"{cell}: {'resuming' if resuming else 'training'} ({budget:g} CPU s)")
    with open(os.path.join(run, f"train-{part}.log"), "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env1())
    if done.returncode != 0:
        tail = open(os.path.join(run, f"train-{part}.log")).read().strip().splitlines()[-1:]
        result = {"cell": cell, "failed": tail[0] if tail else f"exit {done.returncode}"}
        keep(args, cell, result)
        log(f"{cell}: failed: {result['failed']}")
        return
    train, evals = curves(metrics(run))
    cpu_total, wall_total, peak = read_run_times(run)
    last = train[-1]
    result = {"cell": cell, "steps": last[0], "train_cpu_s": last[1], "step_cpu_ms": 1000 * last[1] / last[0],
              "process_cpu_s": cpu_total, "wall_s": wall_total, "peak_rss_mib": peak,
              "final_train_loss": last[2], "final_eval": evals[-1][2] if evals else None,
              "checkpoint": os.path.relpath(newest_checkpoint(run), ROOT), "train_curve": train, "eval_curve": evals}
    if spec.get("test"):
        result["test"] = evaluate(attnkit, run, "test", args)
        result["test_items"] = eval_items(args, attnkit, run, "test")
    if cell in NEEDS["a"]:
        result["val_items"] = val_items(args, attnkit, run)
    result["machine"] = machine()
    keep(args, cell, result)
    log(f"{cell}: {result['steps']} steps" + (f", test accuracy {result['test']['accuracy']:.3f}" if "test" in result
                                              else ""))


def store_path(args, cell):
    return os.path.join(args.store, os.path.basename(args.runs), cell + ".json")


def keep(args, cell, result):
    """A cell's result.json, and for a finished cell its record in --store (kept in git: runs/ lives
    on one machine, the record outlives it, so a study is filled over sessions on several machines)."""
    write_json(os.path.join(cell_dir(args, cell), "result.json"), result)
    if args.store and "failed" not in result:
        os.makedirs(os.path.dirname(store_path(args, cell)), exist_ok=True)
        write_json(store_path(args, cell), result, indent=None)


def amend(args, cell, **fields):
    """Adds fields to a finished cell's result.json and its record (from the run's own result.json,
    whose curves load() would have thinned)."""
    with open(os.path.join(cell_dir(args, cell), "result.json")) as f:
        keep(args, cell, dict(json.load(f), **fields))


def val_items(args, attnkit, run):
    """The per-block items (masked tokens' summed NLL, their count) of the run's newest checkpoint
    on its validation blocks: what `attnkit compare` pairs between kinds."""
    return eval_items(args, attnkit, run, "val")


def eval_items(args, attnkit, run, split):
    """`attnkit eval --items` of the run's newest checkpoint: on its own validation blocks (val; the
    run's task.eval_examples), or on every test example (test: a classification cell's passages,
    each right or not)."""
    out = os.path.join(run, f"{split}-items.json")
    if not os.path.exists(out):
        command = ["nice", "-n", str(args.nice), attnkit, "--threads", "1", "--quiet", "eval", "--run", run, "--split",
                   split, *(["--examples", "0"] if split == "test" else []), "--items", out + ".tmp"]
        done = subprocess.run(command, capture_output=True, text=True, env=env1())
        if done.returncode != 0:
            sys.exit(f"pretrain_results: eval --items of {run} failed: {done.stderr.strip()}")
        os.replace(out + ".tmp", out)
    with open(out) as f:
        return json.load(f)


def evaluate(attnkit, run, split, args, checkpoint=None):
    # Validation is the run's own held-out blocks (eval refuses another count); test is every example.
    command = ["nice", "-n", str(args.nice), attnkit, "--threads", "1", "eval", "--run", run, "--split", split,
               *(["--examples", "0"] if split == "test" else [])]
    if checkpoint:
        command += ["--checkpoint", checkpoint]
    done = subprocess.run(command, capture_output=True, text=True, env=env1())
    if done.returncode != 0:
        sys.exit(f"pretrain_results: eval of {run} failed: {done.stderr.strip()}")
    found = re.search(r"^step (\d+) split \S+ (.*)$", done.stdout, re.M)
    values = {k: float(v) for k, v in re.findall(r"(\w+)=([-0-9.eE+na]+)", found.group(2))}
    return dict(values, step=int(found.group(1)))


# ------------------------------------------------------------------------------------------------
# After training: samples and analyses (each written once to its own JSON in the run directory)


def read_safetensors(path, name):
    """One float32 tensor of a safetensors file, as (flat values, shape)."""
    import array
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    entry = header[name]
    if entry["dtype"] != "F32":
        sys.exit(f"pretrain_results: {path}: {name} is {entry['dtype']}, expected F32")
    begin, end = entry["data_offsets"]
    values = array.array("f")
    values.frombytes(data[begin:end])
    if sys.byteorder != "little":
        values.byteswap()
    return values, entry["shape"]


def argmax_row(values, row, width):
    part = values[row * width:(row + 1) * width]
    return max(range(width), key=part.__getitem__)


def tokenize(attnkit, lines, special=True):
    command = [attnkit, "tokenize", "--tokenizer", TOKENIZER] + ([] if special else ["--no-special-tokens"])
    done = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    return [[int(t) for t in line.split()] for line in done.stdout.strip("\n").split("\n")]


def cloze_sentences():
    """The first CLOZE_SENTENCES held-out documents (corpus/valid.txt) of 8 to 20 words."""
    chosen = []
    with open(f"{CORPUS}/valid.txt") as f:
        document = []
        for line in f:
            if line.strip():
                document.append(line.strip())
                continue
            text = " ".join(document)
            document = []
            if 8 <= len(text.split()) <= 20 and "\t" not in text:
                chosen.append(text)
            if len(chosen) == CLOZE_SENTENCES:
                break
    return chosen


def cloze(args, attnkit, cell):
    """Masks CLOZE_MASKS whole-word tokens (evenly spread) of each cloze sentence and prints the
    checkpoint's top-1 token at each."""
    run = cell_dir(args, cell)
    path = os.path.join(run, "cloze.json")
    if os.path.isfile(path):
        return json.load(open(path))
    ids = vocab_ids()
    inverse = {i: t for t, i in ids.items()}
    mask = ids["[MASK]"]
    rows = []
    for sentence, tokens in zip(cloze_sentences(), tokenize(attnkit, cloze_sentences())):
        inner = [i for i in range(1, len(tokens) - 1) if not inverse[tokens[i]].startswith("##")
                 and (i + 1 >= len(tokens) - 1 or not inverse[tokens[i + 1]].startswith("##"))
                 and inverse[tokens[i]].isalpha()]
        if len(inner) < CLOZE_MASKS:
            continue
        positions = [inner[(j + 1) * len(inner) // (CLOZE_MASKS + 1)] for j in range(CLOZE_MASKS)]
        masked = [mask if i in positions else t for i, t in enumerate(tokens)]
        out = os.path.join(run, "cloze.safetensors")
        subprocess.run([attnkit, "--threads", "1", "encode", "--model", newest_checkpoint(run), "--ids",
                        " ".join(map(str, masked)), "--output", out], check=True, capture_output=True, env=env1())
        logits, shape = read_safetensors(out, "mlm_logits")  # [1, n, vocab]
        os.remove(out)
        show = lambda seq: " ".join(inverse[t] for t in seq[1:-1]).replace(" ##", "")  # noqa: E731
        rows.append({"text": sentence, "masked": show(masked),
                     "answers": [inverse[tokens[p]] for p in positions],
                     "predicted": [inverse[argmax_row(logits, p, shape[-1])] for p in positions]})
    write_json(path, rows)
    return rows


def generations(args, attnkit, cell):
    run = cell_dir(args, cell)
    path = os.path.join(run, "generations.json")
    if os.path.isfile(path):
        return json.load(open(path))
    rows = []
    for prompt in GENERATION_PROMPTS:
        done = subprocess.run([attnkit, "--threads", "1", "generate", "--model", newest_checkpoint(run), "--prompt",
                               prompt, "--strategy", "greedy", "--max-new-tokens", "24", "--no-repeat-ngram-size", "3"],
                              capture_output=True, text=True, env=env1())
        text = re.sub(r"\s+", " ", done.stdout).strip().replace("`", "'") if done.returncode == 0 else None
        rows.append({"prompt": prompt, "text": text,
                     "error": None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]})
    write_json(path, rows)
    return rows


def conditional(args, attnkit):
    """Samples per class from the conditional LM, scored by the classifier fine-tuned from mlm-softmax:
    for each class, the share of its samples the classifier assigns to that class."""
    run = cell_dir(args, "clm")
    path = os.path.join(run, "conditional.json")
    if os.path.isfile(path):
        return json.load(open(path))
    samples = CONDITIONAL_SAMPLES if args.budget >= SMOKE_BUDGET else 4
    ids = vocab_ids()
    classifier = cell_dir(args, "ft-softmax-pretrained")
    score_dir = os.path.abspath(os.path.join(run, "scored"))
    os.makedirs(score_dir, exist_ok=True)
    config = open(os.path.join(classifier, "config.toml")).read()
    config = re.sub(r'(?m)^data = ".*"$', f'data = "{score_dir}/train.tsv"', config, count=1)
    open(os.path.join(score_dir, "config.toml"), "w").write(config)
    if not os.path.exists(os.path.join(score_dir, "train.tsv")):
        os.symlink(os.path.abspath(f"{CLASSIFY}/train.tsv"), os.path.join(score_dir, "train.tsv"))
    per_class = {}
    for label in CATEGORIES:
        done = subprocess.run([attnkit, "--threads", "1", "generate", "--model", newest_checkpoint(run), "--prompt-ids",
                               str(ids["[CLS]"]), "--condition", label, "--strategy", "sample", "--top-p", "0.95",
                               "--num-return-sequences", str(samples), "--max-new-tokens", "80", "--seed", "0",
                               "--json"], capture_output=True, text=True, env=env1())
        if done.returncode != 0:
            per_class[label] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
            continue
        texts = generated_texts(done.stdout)
        if not texts:
            per_class[label] = {"error": "every sample was empty"}
            continue
        with open(os.path.join(score_dir, "test.tsv"), "w") as f:
            for t in texts:
                f.write(f"{t}\t{label}\n")
        scored = evaluate(attnkit, score_dir, "test", args, checkpoint=newest_checkpoint(classifier))
        per_class[label] = {"samples": len(texts), "classified_as_condition": scored["accuracy"], "examples": texts[:2]}
    write_json(path, per_class)
    return per_class


def generated_texts(stdout):
    """The sampled texts of `attnkit generate --json` (one JSON document: results[].sequences[].text)."""
    texts = []
    for result in json.loads(stdout)["results"]:
        for sequence in result["sequences"]:
            text = sequence.get("text", "").replace("[CLS]", "").replace("[SEP]", "")
            text = re.sub(r"\s+", " ", text).strip()
            if text:
                texts.append(text)
    return texts


def collapse(args, attnkit, cell=None, kind=None):
    """`attnkit analyze collapse` of a checkpoint (cell) or of random stacks of its shape (kind),
    on held-out fortunes: per variant, log10 of the mean relative residual per layer and the
    layer where X vanished, if it did."""
    out = os.path.join(args.runs, "collapse", cell or f"random-{slug(kind)}")
    path = os.path.join(out, "collapse.json")
    if not os.path.isfile(path):
        source = (["--model", newest_checkpoint(cell_dir(args, cell))] if cell else
                  ["--random", "bert", "--layers", str(SIZE["layers"]), "--heads", str(SIZE["heads"]), "--hidden",
                   str(SIZE["hidden"]), "--intermediate", str(SIZE["intermediate"]), "--vocab", str(VOCAB), "--kind",
                   kind, "--seeds", str(COLLAPSE["seeds"]), "--tokenizer", TOKENIZER])
        samples = COLLAPSE["samples"] if args.budget >= SMOKE_BUDGET else 2
        done = subprocess.run(["nice", "-n", str(args.nice), attnkit, "--threads", "1", "--quiet", "--seed", "0",
                               "analyze", "collapse", *source, "--data", f"{CORPUS}/valid.txt", "--samples",
                               str(samples), "--seq-len", str(COLLAPSE["seq_len"]), "--no-short-paths", "--out", out],
                              capture_output=True, text=True, env=env1())
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.load(open(path))["results"][0]
    rows = {}
    for variant in result["variants"]:
        layers = variant["layers"]
        vanished = [l["layer"] for l in layers if l.get("vanished")]
        rows[variant["name"]] = {"label": variant["label"],
                                 "log10": [l["relative_composite"]["log10_mean"] for l in layers],
                                 "vanished_at": vanished[0] if vanished else None}
    return {"kind": result["kind"], "models": result["models"], "inputs": result["inputs"], "variants": rows}


# ------------------------------------------------------------------------------------------------
# Report


def thin(points, most=100):
    if len(points) <= most:
        return points
    stride = -(-len(points) // most)
    return points[::-1][::stride][::-1]


def load(args, cell):
    """A cell's result: its run's result.json, else its record in the store (None: not run)."""
    path = os.path.join(cell_dir(args, cell), "result.json")
    if not os.path.isfile(path) and args.store:
        path = store_path(args, cell)
    if not os.path.isfile(path):
        return None
    result = json.load(open(path))
    if "train_curve" in result:
        result["train_curve"] = thin(result["train_curve"])
    return result


def plot(args, docs, name, title, xlabel, ylabel, series):
    """series: [(label, [[x, y], ...], style)] -> DOCS/images/NAME.svg via gnuplot."""
    series = [s for s in series if s[1]]
    if not series or not shutil.which("gnuplot"):
        return None
    work = os.path.join(args.runs, "plots")
    os.makedirs(work, exist_ok=True)
    plots = []
    for i, (label, points, style) in enumerate(series):
        data = os.path.join(work, f"{name}-{i}.dat")
        with open(data, "w") as f:
            f.writelines(f"{x} {y}\n" for x, y in points)
        plots.append(f"'{data}' using 1:2 with {style} title '{label}'")
    images = os.path.join(docs, "images")
    os.makedirs(images, exist_ok=True)
    target = os.path.join(images, f"{name}.svg")
    script = "\n".join([
        "set terminal svg size 720,420 dynamic font 'sans,12' background '#ffffff'",
        f"set output '{target}.tmp'", f"set title '{title}'", f"set xlabel '{xlabel}'", f"set ylabel '{ylabel}'",
        "set key top right", "set grid", "plot " + ", \\\n  ".join(plots), "unset output"])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.replace(target + ".tmp", target)
    return os.path.relpath(target, docs)


COLOURS = {"softmax": "#1f77b4", "cosformer": "#d62728", "linear:relu": "#2ca02c", "linear:elu": "#9467bd",
           "lm": "#1f77b4", "plm-one-stream": "#ff7f0e", "plm-two-stream": "#2ca02c", "mlm-softmax": "#d62728"}


def loss_series(results, names, labels, axis):
    """Training loss (thin line) and validation loss (line with points) of each cell; axis 0 =
    steps, 1 = CPU seconds."""
    out = []
    for name, label in zip(names, labels):
        r = results.get(name)
        if not r or "train_curve" not in r:
            continue
        colour = COLOURS.get(label, COLOURS.get(name, "#444444"))
        out.append((f"{label} train", [[p[axis], p[2]] for p in r["train_curve"]], f"lines lw 1 lc rgb '{colour}'"))
        out.append((f"{label} valid", [[p[axis], p[2]["loss"]] for p in r["eval_curve"] if "loss" in p[2]],
                    f"linespoints lw 2 pt 7 ps 0.6 dt 2 lc rgb '{colour}'"))
    return out


def summarise(args, attnkit, experiments, docs):
    results = {cell: load(args, cell) for cell in CELLS}
    results = {k: v for k, v in results.items() if v}
    summary = {"budget_cpu_s": args.budget, "finetune_budget_cpu_s": args.finetune_budget,
               "smoke": args.budget < SMOKE_BUDGET,
               "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
               "model": SIZE, "vocab": VOCAB, "truncate": TRUNCATE, "kinds": KINDS, "categories": CATEGORIES,
               "data": data_description(), "cells": results, "plots": {}}
    done = lambda cell: cell in results and "failed" not in results[cell]  # noqa: E731
    prefix = "pretrain" + study(args.budget, args.finetune_budget)
    if "a" in experiments:
        mask_input_evals(args, attnkit, results)
        summary["mlm_comparisons"] = mlm_comparisons(args, attnkit, results)
    if all(done(f"mlm-{slug(k)}") for k in KINDS[:1]):
        names = [f"mlm-{slug(k)}" for k in KINDS]
        summary["plots"]["mlm_steps"] = plot(args, docs, f"{prefix}-mlm-steps", "MLM loss against steps (same model, same tokens)",
                                             "training step", "MLM loss (masked tokens)", loss_series(results, names, KINDS, 0))
        summary["plots"]["mlm_cpu"] = plot(args, docs, f"{prefix}-mlm-cpu", "MLM loss against CPU time of training steps (one thread)",
                                           "CPU seconds of training steps", "MLM loss (masked tokens)",
                                           loss_series(results, names, KINDS, 1))
    objectives = ["mlm-softmax", "lm", "plm-one-stream", "plm-two-stream"]
    if "c" in experiments and any(done(c) for c in objectives[1:]):
        summary["plots"]["objectives"] = plot(args, docs, f"{prefix}-objectives", "Training objectives on the same corpus (softmax)",
                                              "training step", "loss over the predicted tokens",
                                              loss_series(results, objectives, objectives, 0))
    samples = {}
    if "c" in experiments:
        if done("mlm-softmax"):
            samples["cloze"] = {"mlm-softmax": cloze(args, attnkit, "mlm-softmax")}
        samples["generation"] = {c: generations(args, attnkit, c) for c in ("lm", "plm-one-stream", "plm-two-stream")
                                 if done(c)}
    if "d" in experiments and done("clm") and done("ft-softmax-pretrained"):
        samples["conditional"] = conditional(args, attnkit)
    summary["samples"] = samples
    if "e" in experiments:
        summary["collapse"] = {"trained": {k: collapse(args, attnkit, cell=f"mlm-{slug(k)}") for k in KINDS
                                           if done(f"mlm-{slug(k)}")},
                               "random": {k: collapse(args, attnkit, kind=k) for k in KINDS}, "settings": COLLAPSE}
    return summary


# (a)'s kinds compared on the same validation blocks and masks (the cells share the run seed):
# each against softmax, and cosFormer against linear:relu (what its cos re-weighting adds).
MLM_PAIRS = [(k, "softmax") for k in KINDS[1:]] + [("cosformer", "linear:relu")]


MASK_INPUT_KEYS = ("mask_input_perplexity", "mask_input_accuracy", "unigram_perplexity", "unigram_accuracy")


def mask_input_evals(args, attnkit, results):
    """(a)'s cells on the targets whose input is [MASK], beside the frequency baseline on the same
    targets (`attnkit eval`'s mask_input_* and unigram_*; docs/training.md): from the final
    evaluation, else from an eval of the last checkpoint when its run is on this machine and the
    build gives them (kept in the record as mask_input_eval)."""
    for kind in KINDS:
        cell = f"mlm-{slug(kind)}"
        r = results.get(cell)
        if not r or "failed" in r or "mask_input_eval" in r:
            continue
        final = r.get("final_eval") or {}
        if all(k in final for k in MASK_INPUT_KEYS):
            r["mask_input_eval"] = {k: final[k] for k in MASK_INPUT_KEYS}
            continue
        run = cell_dir(args, cell)
        if not os.path.isdir(os.path.join(run, "checkpoints")):
            continue
        found = evaluate(attnkit, run, "val", args)
        if not all(k in found for k in MASK_INPUT_KEYS) or found["step"] != r.get("steps"):
            continue
        r["mask_input_eval"] = {k: found[k] for k in MASK_INPUT_KEYS}
        amend(args, cell, mask_input_eval=r["mask_input_eval"])


def mlm_comparisons(args, attnkit, results):
    """The paired bootstrap (`attnkit compare`, 1,000 resamples, 95%) of validation perplexity for
    each pair of MLM_PAIRS whose two cells are finished; a cell finished before its items were kept
    gets them now when its run is on this machine."""
    for kind in KINDS:
        cell = f"mlm-{slug(kind)}"
        r = results.get(cell)
        if r and "failed" not in r and "val_items" not in r and os.path.isdir(os.path.join(cell_dir(args, cell), "checkpoints")):
            r["val_items"] = val_items(args, attnkit, cell_dir(args, cell))
            amend(args, cell, val_items=r["val_items"])
    out = []
    for a, b in MLM_PAIRS:
        ra, rb = results.get(f"mlm-{slug(a)}"), results.get(f"mlm-{slug(b)}")
        if not (ra and rb and "val_items" in ra and "val_items" in rb):
            continue
        p = compare_items(os.path.dirname(attnkit), ra["val_items"], rb["val_items"], "pretrain_results")
        out.append({"a": a, "b": b, **{k: p[k] for k in ("difference", "low", "high", "verdict", "items")},
                    "a_perplexity": p["a_score"], "b_perplexity": p["b_score"]})
    return out


def data_description():
    description = {}
    for name, path in (("corpus_train", f"{CORPUS}/train.txt"), ("corpus_valid", f"{CORPUS}/valid.txt")):
        if os.path.isfile(path):
            text = open(path).read()
            description[name] = {"bytes": len(text.encode()), "documents": len([d for d in text.split("\n\n") if d.strip()])}
    for split in ("train", "val", "test"):
        path = f"{CLASSIFY}/{split}.tsv"
        if os.path.isfile(path):
            description[f"classify_{split}"] = sum(1 for _ in open(path))
    return description


def fnum(value, digits=3):
    return "—" if value is None else f"{value:.{digits}f}"


def eval_value(cell, key):
    if not cell or "failed" in cell or not cell.get("final_eval"):
        return None
    return cell["final_eval"].get(key)


def cost(cell):
    if not cell:
        return "not finished"
    if "failed" in cell:
        return f"failed: {cell['failed']}"
    # GNU time reports a process when it ends: a part killed with its session is missing from the sum.
    partial = cell["process_cpu_s"] < cell["train_cpu_s"]
    return (f"{cell['steps']} steps, {cell['train_cpu_s']:.0f} CPU s of steps ({cell['step_cpu_ms']:.0f} ms/step), "
            f"{cell['process_cpu_s']:.0f} CPU s / {cell['wall_s']:.0f} s wall in "
            f"{'the processes that ended (an interrupted one is not counted)' if partial else 'all'}, "
            f"{cell['peak_rss_mib']:.0f} MiB")


def markdown(summary, experiments):
    cells = summary["cells"]
    b, fb = summary["budget_cpu_s"], summary["finetune_budget_cpu_s"]
    data = summary["data"]
    begin, end = markers(b, fb)
    main_study = study(b, fb) == ""
    study_kinds = summary.get("study_kinds") or KINDS  # (a)'s kinds (--kinds)
    title = ("## Pretraining experiments (issue 32): MLM per attention kind, fine-tuning, PLM, ALBERT, key_size, "
             "conditional LM, rank collapse") if main_study else f"## Pretraining at {b:g} CPU s per cell"
    out = [begin, "", title, ""]
    if summary["smoke"]:
        out += [f"**SMOKE RUN ({b:g} CPU s per cell): a check of the pipeline only. These numbers are not "
                "results.**", ""]
    out += [f"Generated by `bench/pretrain_results.py --budget {b:g} --finetune-budget {fb:g} --experiments "
            f"{' '.join(experiments)}` (last run {summary['date']}); do not edit by hand, run it again. Numbers and "
            f"curves also in `{summary_name(b, fb)}`. Machine: " + summary["machine"] + ".", ""]
    if not main_study:
        out += [f"Model, data, tokenizer and schedule rules as in the section at {DEFAULT_BUDGETS[0]} CPU s above; only "
                f"the budget differs: **{b:g} CPU s of training steps per pretraining cell**, {fb:g} per fine-tuning "
                "cell (one thread; warm-up, evaluation interval and cosine decay scale with it).", ""]
    else:
        out += [f"**Model of every cell** (where a row says nothing else): 4 layers, hidden 256, 4 heads, feed-forward "
                f"1024, dropout 0.1 (BERT-mini's shape); BERT blocks (post-LN) for mlm and classification, GPT-2 blocks "
                f"(pre-LN) for lm, plm and the conditional LM (the tasks' default families); blocks of {TRUNCATE} tokens, "
                f"batch 16, AdamW (weight decay 0.01), warm-up of min(50, budget / 12) steps, cosine decay over the "
                f"budget, clip 1.0; pretraining lr {PRETRAIN_LR}, fine-tuning lr {FINETUNE_LR}. **Budget**: {b:g} CPU s "
                f"of training steps per pretraining cell, {fb:g} per fine-tuning cell (`run.cpu_budget`, one thread; "
                "evaluations do not count).", "",
                "**Data** (Debian's fortunes, nothing downloaded): pretraining text = `attnkit data corpus` of the 38 "
                "English fortune files other than the four classification categories "
                f"({data.get('corpus_train', {}).get('bytes', 0):,} bytes, "
                f"{data.get('corpus_train', {}).get('documents', 0):,} fortunes; the MLM/LM tasks hold out every 20th "
                f"block of it for validation); an {VOCAB:,}-token WordPiece vocabulary trained on it by `attnkit "
                "tokenizer train`; downstream task = which fortune file a passage of 100–400 bytes comes from "
                f"({', '.join(CATEGORIES)}; `attnkit data lra-text`, split by fortune, balanced; "
                f"{data.get('classify_train', 0):,} / {data.get('classify_val', 0):,} / {data.get('classify_test', 0):,} "
                "train / val / test passages; chance 25%).", ""]
    if "a" in experiments:
        out += ["### (a) MLM pretraining per attention kind", "",
                "The same model and the same token stream; only `model.attention` differs (linear:relu is cosFormer "
                "without its cos re-weighting). Validation: the held-out blocks with fixed masks.", ""]
        for key, caption in (("mlm_steps", "against steps"), ("mlm_cpu", "against CPU seconds of training steps")):
            if summary["plots"].get(key):
                out.append(f"![MLM loss {caption}]({summary['plots'][key]})")
        out += ["", "The x axis of the second plot is the CPU time of the training steps (one thread), which is the "
                "wall-clock time of the steps on an idle core; the wall time of this shared machine is given per cell "
                "below but does not compare between cells.", ""]
        ran_on = {k: cells[f"mlm-{slug(k)}"].get("machine") for k in study_kinds if cells.get(f"mlm-{slug(k)}")}
        if len({m for m in ran_on.values() if m}) > 1:
            out += ["**These cells ran on different machines** (" +
                    "; ".join(f"{k}: {m or 'not recorded'}" for k, m in ran_on.items()) +
                    "): an equal CPU budget is not equal work across them; compare them against steps, not CPU "
                    "seconds.", ""]
        shared = shared_runs({k: cpu_share(cells[f"mlm-{slug(k)}"]) for k in study_kinds
                              if cells.get(f"mlm-{slug(k)}")})
        if shared:
            out += [f"**Some cells shared their core** (CPU seconds per wall second: {shared}; about 1 on a core "
                    "of their own): beside other processes a CPU second can buy fewer steps, so the comparison at "
                    "equal CPU seconds is not quite like for like; the comparison against steps (the first plot) "
                    "is.", ""]
        out += [
                "| attention | validation MLM perplexity | validation loss | masked accuracy | final training loss | cost |",
                "|---|---|---|---|---|---|"]
        for kind in study_kinds:
            c = cells.get(f"mlm-{slug(kind)}")
            out.append(f"| {kind} | {fnum(eval_value(c, 'perplexity'), 1)} | {fnum(eval_value(c, 'loss'))} | "
                       f"{fnum(eval_value(c, 'masked_accuracy'))} | "
                       f"{fnum(c.get('final_train_loss') if c else None)} | {cost(c)} |")
        out.append("")
        on_mask = {k: cells[f"mlm-{slug(k)}"]["mask_input_eval"] for k in study_kinds
                   if (cells.get(f"mlm-{slug(k)}") or {}).get("mask_input_eval")}
        if on_mask:
            out += ["On the validation targets whose input is [MASK] (80% of the masked tokens; the others show the "
                    "model their own token or a random one, which it can copy or correct), beside the frequency "
                    "baseline on the same targets: each predicted from the training blocks' token counts, whatever "
                    "its context, the most frequent token as its guess (`attnkit eval`'s mask_input_* and unigram_*). "
                    "A model level with the baseline there has learned which tokens are frequent, not how to read "
                    "the context:", "",
                    "| attention | perplexity at [MASK] | baseline's | accuracy at [MASK] | baseline's |",
                    "|---|---|---|---|---|"]
            for kind, e in on_mask.items():
                out.append(f"| {kind} | {e['mask_input_perplexity']:.1f} | {e['unigram_perplexity']:.1f} | "
                           f"{100 * e['mask_input_accuracy']:.1f}% | {100 * e['unigram_accuracy']:.1f}% |")
            out.append("")
        comparisons = summary.get("mlm_comparisons") or []
        if comparisons:
            out += [f"Kinds compared on every validation block ({comparisons[0]['items']:,} blocks with masked tokens; "
                    "the same masks for every kind): validation perplexity of each cell's last checkpoint, and the "
                    "paired bootstrap of the difference (`attnkit compare` of `eval --items`, 1,000 resamples, 95%; "
                    "\"level\" unless the interval excludes 0; lower is better):", "",
                    "| a − b | perplexity a / b | difference [95%] | verdict |", "|---|---|---|---|"]
            for c in comparisons:
                verdict = "level" if c["verdict"] == "level" else f"{c['a'] if c['verdict'] == 'a' else c['b']} better"
                out.append(f"| {c['a']} − {c['b']} | {c['a_perplexity']:.1f} / {c['b_perplexity']:.1f} | "
                           f"{c['difference']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}] | {verdict} |")
            out.append("")
    if "b" in experiments:
        out += ["### (b) Fine-tuning: pretrained vs from scratch", "",
                f"Fortune-category classification, {fb:g} CPU s of steps each; the pretrained cells start from the "
                "last checkpoint of (a) (`train --init`; mean pooling and a fresh classification layer), the "
                "scratch cells from random weights of the same shape (mean pooling too). Test accuracy (%) of the last "
                "checkpoint on the whole test split, one run per cell (seed 0), no interval: a difference of a few "
                "points is not a finding (`bench/finetune_seeds.py --studies pretrained-KIND` runs a kind's pair by "
                "seeds with paired intervals):", "",
                "| attention | pretrained (MLM) → fine-tuned | from scratch | cost (pretrained / scratch) |", "|---|---|---|---|"]
        for kind in KINDS:
            p, s = cells.get(f"ft-{slug(kind)}-pretrained"), cells.get(f"ft-{slug(kind)}-scratch")
            out.append(f"| {kind} | {accuracy(p)} | {accuracy(s)} | {cost(p)} / {cost(s)} |")
        out.append("")
    if "c" in experiments:
        out += ["### (c) Permutation LM next to the causal LM and MLM", "",
                f"Same corpus, tokenizer, size and budget, softmax attention. Losses are over each objective's own "
                f"targets and do not measure the same thing: mlm predicts 15% of the tokens from both sides, lm every "
                f"next token from its left, plm the last {PREDICT_LAST} of {TRUNCATE} tokens of a random factorisation "
                "order from the tokens before them in that order (one stream: not knowing which position it predicts; "
                "two streams: knowing it).", ""]
        if summary["plots"].get("objectives"):
            out += [f"![objectives]({summary['plots']['objectives']})", ""]
        out += ["| objective | validation loss | validation perplexity | token / masked accuracy | cost |", "|---|---|---|---|---|"]
        for cell in ("mlm-softmax", "lm", "plm-one-stream", "plm-two-stream"):
            c = cells.get(cell)
            acc = eval_value(c, "token_accuracy") if eval_value(c, "token_accuracy") is not None else eval_value(c, "masked_accuracy")
            out.append(f"| {cell} | {fnum(eval_value(c, 'loss'))} | {fnum(eval_value(c, 'perplexity'), 1)} | {fnum(acc)} | "
                       f"{cost(c)} |")
        out.append("")
        cl = summary["samples"].get("cloze", {}).get("mlm-softmax")
        if cl:
            out += ["Cloze (mlm-softmax, held-out fortunes, top-1 at each [MASK]):", ""]
            for row in cl:
                predicted = " ".join(f"`{t}`" for t in row["predicted"])
                answers = " ".join(f"`{t}`" for t in row["answers"])
                out.append(f"- `{row['masked']}` → {predicted} (truth: {answers})")
            out.append("")
        gens = summary["samples"].get("generation", {})
        if gens:
            out += ["Greedy generation (`attnkit generate`, 24 new tokens, no repeated trigram):", ""]
            for cell, rows in gens.items():
                for row in rows:
                    text = row["text"] if row["text"] is not None else f"(refused: {row['error']})"
                    out.append(f"- {cell}: `{text}`")
            out += ["", "Greedy decoding reads left to right: for plm-one-stream that is the identity order, one of the "
                    "orders it trained on (the causal LM's factorisation). `attnkit generate` runs the content stream "
                    "only; the two-stream objective trains the query stream to predict, not the content stream, so "
                    "plm-two-stream's samples show an untrained predictor, not what its query stream learned.", ""]
    if "d" in experiments:
        key_small = SIZE["hidden"] // KEY_HEADS
        out += ["### (d) The post list's other experiments", "",
                f"**ALBERT shared vs un-shared**: an ALBERT of the same size (one shared block) pretrained with MLM "
                f"for {b:g} CPU s (`--model.family albert`), then fine-tuned on the classification task for {fb:g} "
                "CPU s as it is and with `--model.unshare true` (each layer its own copy of the block):", "",
                "| model | test accuracy (%) | cost |", "|---|---|---|"]
        out.append(f"| ALBERT MLM (validation perplexity {fnum(eval_value(cells.get('mlm-albert'), 'perplexity'), 1)}) | — | "
                   f"{cost(cells.get('mlm-albert'))} |")
        for cell in ("ft-albert-shared", "ft-albert-unshared"):
            out.append(f"| {cell} | {accuracy(cells.get(cell))} | {cost(cells.get(cell))} |")
        out += ["", "One run each (seed 0), no interval; the same comparison over seeds with paired intervals: "
                "\"Fine-tuning by seeds\" (`bench/finetune_seeds.py`).", "",
                f"**key_size** (the low-rank bottleneck): MLM as in (a) with softmax and {KEY_HEADS} heads, key_size "
                f"{key_small} (= hidden / heads) against {KEY_LARGE}, {b:g} CPU s each:", "",
                "| key_size | validation perplexity | validation loss | masked accuracy | cost |", "|---|---|---|---|---|"]
        for key in (key_small, KEY_LARGE):
            c = cells.get(f"mlm-heads{KEY_HEADS}-key{key}")
            out.append(f"| {key} | {fnum(eval_value(c, 'perplexity'), 1)} | {fnum(eval_value(c, 'loss'))} | "
                       f"{fnum(eval_value(c, 'masked_accuracy'))} | {cost(c)} |")
        c = cells.get("clm")
        out += ["", f"**Conditional LM** (Conditional LayerNorm, `--task.name conditional-lm` on the labelled passages, "
                f"{b:g} CPU s; validation perplexity {fnum(eval_value(c, 'perplexity'), 1)}; {cost(c)}). Samples per "
                "class (`attnkit generate --condition C --strategy sample --top-p 0.95`, 80 new tokens), and the share "
                "the classifier fine-tuned from mlm-softmax in (b) assigns to the conditioned class (chance 25%; "
                f"the classifier's accuracy on real test passages: {accuracy(cells.get('ft-softmax-pretrained'))}%):", "",
                "| condition | samples | classified as the condition (%) | a sample |", "|---|---|---|---|"]
        for label, row in summary["samples"].get("conditional", {}).items():
            if "error" in row:
                out.append(f"| {label} | — | failed: {row['error']} | |")
            else:
                example = row["examples"][0][:160].replace("|", "\\|") if row["examples"] else ""
                out.append(f"| {label} | {row['samples']} | {100 * row['classified_as_condition']:.0f} | `{example}` |")
        out.append("")
    if "e" in experiments and summary.get("collapse"):
        co = summary["collapse"]
        out += ["### (e) Rank collapse of the pretrained checkpoints", "",
                f"`attnkit analyze collapse` (float64, {co['settings']['samples']} windows of {co['settings']['seq_len']} "
                f"tokens of the held-out fortunes, relative composite residual, log10 of its mean per layer, layers 0–4) "
                f"of each checkpoint of (a), beside {co['settings']['seeds']} random stacks of the same shape "
                "(`--random bert`, std 0.02). A residual relative to an X that vanished (‖X‖ = 0 in float64) is "
                "undefined; such layers are named.", "",
                "| attention | model | pure attention | attention + skip | full block | X vanished (pure attention) |",
                "|---|---|---|---|---|---|"]
        for kind in KINDS:
            for which in ("random", "trained"):
                row = co[which].get(kind)
                if not row:
                    continue
                if "error" in row:
                    out.append(f"| {kind} | {which} | failed: {row['error']} | | | |")
                    continue
                v = row["variants"]
                fmt = lambda name: " ".join(f"{x:.1f}" for x in v[name]["log10"]) if name in v else "—"  # noqa: E731
                gone = v.get("pure_attention", {}).get("vanished_at")
                out.append(f"| {kind} | {which} | {fmt('pure_attention')} | {fmt('attention_skip')} | {fmt('full_block')} | "
                           f"{'layer ' + str(gone) if gone is not None else 'no'} |")
        out.append("")
    total = planned_cpu(summary["budget_cpu_s"], summary["finetune_budget_cpu_s"], experiments, study_kinds)
    kinds_flag = f" --kinds {','.join(study_kinds)}" if study_kinds != KINDS else ""
    out += ["Reproduce: `make build && /usr/bin/python3 bench/pretrain_results.py --budget "
            f"{b:g} --finetune-budget {fb:g} --experiments {' '.join(experiments)}{kinds_flag}` ({total / 3600:.1f} CPU hours of "
            "training steps for these experiments, plus evaluations and analyses; one cell at a time, niced; a rerun "
            "skips finished cells and resumes interrupted ones).", "", end]
    return "\n".join(out) + "\n"


def accuracy(cell):
    if not cell:
        return "not finished"
    if "failed" in cell:
        return "failed"
    return f"{100 * cell['test']['accuracy']:.1f}" if cell.get("test") else "—"


def reported(args, experiments):
    """The experiments of the report: those asked for, and every other one with a finished cell of
    its own (or, for (e), an analysis already made), so that running experiments one at a time
    never drops an earlier one from the docs."""
    shown = []
    for e in EXPERIMENTS:
        own = [c for c in CELLS if CELLS[c]["experiment"] == e]
        done = any((load(args, c) or {}).get("steps") for c in own)
        if e == "e":
            done = os.path.isdir(os.path.join(args.runs, "collapse"))
        if e in experiments or done:
            shown.append(e)
    return shown


def needed(experiments):
    order = []
    for e in experiments:
        for cell in NEEDS[e]:
            if cell not in order:
                order.append(cell)
    return order


def wanted(experiments, kinds):
    """The cells to train: needed(experiments) less (a)'s MLM cells of kinds not in `kinds` (unless
    another experiment asked for needs them)."""
    left_out = {f"mlm-{slug(k)}" for k in KINDS if k not in kinds}
    return [c for c in needed(experiments)
            if c not in left_out or any(c in NEEDS[e] for e in experiments if e != "a")]


def planned_cpu(budget, finetune_budget, experiments, kinds=KINDS):
    return sum(budget if CELLS[c]["budget"] == "pretrain" else finetune_budget for c in wanted(experiments, kinds))


def write_docs(summary, experiments, docs):
    budgets = summary["budget_cpu_s"], summary["finetune_budget_cpu_s"]
    name = summary_name(*budgets)
    write_json(os.path.join(docs, name), summary)
    begin, end = markers(*budgets)
    replace_region(os.path.join(docs, "results.md"), begin, end, markdown(summary, experiments))
    log(f"wrote {docs}/{name} and its part of {docs}/results.md")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--budget", type=float, default=600, help="CPU seconds of training steps per pretraining cell")
    p.add_argument("--finetune-budget", type=float, default=180, help="CPU seconds of training steps per fine-tuning cell")
    p.add_argument("--experiments", nargs="+", default=EXPERIMENTS, choices=EXPERIMENTS)
    p.add_argument("--cells", type=int, default=0, help="train at most N cells, then write the docs (0 = all)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="the attention kinds of experiment (a) to train (the others' cells are left out)")
    p.add_argument("--report-only", action="store_true", help="train nothing; samples and analyses of finished cells")
    p.add_argument("--docs", default="docs", help="where results.md, pretrain-results.json and images/ are written")
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--store", default=os.path.join(ROOT, "docs", "cells"),
                   help="finished cells' records, STORE/pretrain-bB-fF/CELL.json (kept in git; none for smoke runs)")
    p.add_argument("--plan", action="store_true", help="print the cells and the CPU budget, run nothing")
    args = p.parse_args()
    args.kinds = args.kinds.split(",")
    if any(k not in KINDS for k in args.kinds):
        p.error(f"--kinds: each of {', '.join(KINDS)}")
    if args.budget < SMOKE_BUDGET and os.path.abspath(args.store).startswith(os.path.join(ROOT, "docs")):
        args.store = None  # a smoke run's cells are not results
    os.chdir(ROOT)
    experiments = [e for e in EXPERIMENTS if e in args.experiments]
    args.runs = os.path.join("runs", f"pretrain-b{args.budget:g}-f{args.finetune_budget:g}")
    attnkit = os.path.abspath(os.path.join(args.build, "attnkit"))
    docs = os.path.abspath(args.docs)
    if args.plan:
        for cell in wanted(experiments, args.kinds):
            print(f"{cell:28s} {budget_of(args, cell):6g} CPU s  {CELLS[cell]['label']}")
        print(f"total: {planned_cpu(args.budget, args.finetune_budget, experiments, args.kinds) / 3600:.2f} CPU hours "
              "of training steps")
        return
    if args.budget < SMOKE_BUDGET and docs == os.path.join(ROOT, "docs"):
        sys.exit(f"pretrain_results: a budget under {SMOKE_BUDGET} CPU s is a smoke run; give --docs DIR outside docs/")
    if not os.access(attnkit, os.X_OK):
        sys.exit(f"pretrain_results: {attnkit} not found (make build, or --build DIR)")
    if args.report_only and not any(load(args, cell) for cell in needed(experiments)):
        # e.g. on a machine without the runs or records: the region re-rendered from the study's JSON
        # as it is (its numbers kept), rather than empty tables.
        name = summary_name(args.budget, args.finetune_budget)
        render_from_json(os.path.join(docs, name), os.path.join(docs, "results.md"),
                         *markers(args.budget, args.finetune_budget),
                         lambda summary: markdown(summary, summary["experiments"]), "pretrain_results")
        log(f"no finished cells under {args.runs}: {args.docs}/results.md re-rendered from {name}")
        return
    make_data(attnkit)
    if not args.report_only:
        ran = 0
        for cell in wanted(experiments, args.kinds):
            previous = load(args, cell)
            if previous and "failed" not in previous:
                continue
            if previous:  # failed before: try again (resuming its checkpoints, if any)
                os.remove(os.path.join(cell_dir(args, cell), "result.json"))
            init = load(args, CELLS[cell]["init"]) if "init" in CELLS[cell] else {}
            if init is None or "failed" in init:
                log(f"{cell}: skipped, {CELLS[cell]['init']} did not finish")
                continue
            if init and not os.path.isdir(os.path.join(cell_dir(args, CELLS[cell]["init"]), "checkpoints")):
                log(f"{cell}: skipped, {CELLS[cell]['init']}'s checkpoint is not on this machine (only its record "
                    f"{store_path(args, CELLS[cell]['init'])}; remove the record to train it again)")
                continue
            if args.cells and ran >= args.cells:
                break
            run_cell(args, attnkit, cell)
            ran += 1
    shown = reported(args, experiments)
    summary = summarise(args, attnkit, shown, docs)
    summary["experiments"] = shown
    if args.kinds != KINDS:
        summary["study_kinds"] = args.kinds  # --kinds: (a)'s table shows these
    os.makedirs(args.runs, exist_ok=True)
    write_json(os.path.join(args.runs, "summary.json"), summary)
    write_docs(summary, shown, docs)


if __name__ == "__main__":
    main()
