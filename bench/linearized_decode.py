#!/usr/bin/python3
"""What linearizing buys at decoding time (issue 45, part 4: "decoding memory and speed at t = 4096
before and after"): SmolLM2-135M-Instruct (its GGUF file converted to attnkit's format, float32)
against the same model with every self-attention layer converted to `linear:hedgehog` by `attnkit
linearize` (stage 1 only, --transfer-steps batches on English Bible verses; the student is not
fine-tuned, and its quality is not what is measured here: the cost of a decoding step does not
depend on the weights' values). Each model decodes greedily --new-tokens tokens (no EOS) after a
short prompt and after a long one, so that the last position is --prompt-tokens + --new-tokens
(4,096 by default); one process per run, the four runs alternating, --rounds rounds.

    /usr/bin/python3 bench/linearized_decode.py --build build [--threads 1] [--prompt-tokens 4000]
        [--short-tokens 64] [--new-tokens 96] [--rounds 3] [--transfer-steps 40]
    /usr/bin/python3 bench/linearized_decode.py --report-only   # re-render the docs from the JSON

Measured: `attnkit generate --json` timings (inside the process: prefill_s, decode_s) and the
process's peak resident memory (/usr/bin/time -v). The growth of the peak from the short to the long
prompt is what the context costs (a KV cache of layers x 2 x key/value heads x head size floats
per position for softmax; a fixed RNN state for the linear kind, plus the prefill's working memory
in both). Writes docs/linearized-decode.json and its table in docs/analysis.md (between the
linearized-decode markers; tests/python/test_docs_tables.py checks that the two agree)."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_process import run_or_exit, thread_env  # noqa: E402
from gnu_time import read_gnu_time, render_from_json, replace_region, write_json  # noqa: E402

GGUF = os.path.expanduser("~/.cache/attnkit/weights/smollm2-135m-instruct.gguf")
JSON_PATH = os.path.join(ROOT, "docs", "linearized-decode.json")
DOC_PATH = os.path.join(ROOT, "docs", "analysis.md")
BEGIN, END = "<!-- linearized-decode:begin -->", "<!-- linearized-decode:end -->"
KIND = "linear:hedgehog"


def run(argv, threads):
    return run_or_exit(argv, "linearized_decode", thread_env(threads))


def prepare(attnkit, work, threads, steps):
    """The teacher (GGUF -> attnkit format), English verses (the leak-free Bible split's English
    side: `attnkit data parallel`), and the student; each made once in `work`."""
    teacher, student = os.path.join(work, "teacher"), os.path.join(work, "student")
    if not os.path.exists(os.path.join(teacher, "config.json")):
        run([attnkit, "--quiet", "convert", "--from", GGUF, "--to", teacher], threads)
    split = os.path.join(work, "split")
    if not os.path.exists(os.path.join(split, "train.tsv")):
        run([attnkit, "--quiet", "data", "parallel", "--out", split], threads)
    text = {}
    for name in ("train", "val"):
        path = os.path.join(work, f"{name}-en.txt")
        if not os.path.exists(path):
            with open(os.path.join(split, f"{name}.tsv")) as f, open(path + ".tmp", "w") as out:
                for line in f:
                    out.write(line.split("\t", 1)[0] + "\n")
            os.replace(path + ".tmp", path)
        text[name] = path
    if not os.path.exists(os.path.join(student, "transfer.json")):
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            staging = os.path.join(tmp, "student")
            run([attnkit, "--threads", str(threads), "--seed", "0", "linearize", "--model", teacher, "--kind", KIND,
                 "--data", text["train"], "--eval-data", text["val"], "--max-length", "128", "--batch-size", "4",
                 "--steps", str(steps), "--out", staging], threads)
            run(["rm", "-rf", student], 1)
            os.replace(staging, student)
    return teacher, student, text["train"]


def long_prompt(path, words):
    """The first verses of `path` joined into one line of at least `words` words."""
    out = []
    for line in open(path):
        out += line.split()
        if len(out) >= words:
            break
    return " ".join(out)


def measure(attnkit, model, threads, prompt, prompt_tokens, new_tokens):
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        argv = ["/usr/bin/time", "-v", "-o", t.name, attnkit, "--threads", str(threads), "--quiet", "generate",
                "--model", model, "--prompt", prompt, "--max-input-length", str(prompt_tokens), "--no-eos",
                "--max-new-tokens", str(new_tokens), "--json"]
        p = subprocess.run(argv, capture_output=True, text=True, env=thread_env(threads))
        if p.returncode != 0:
            sys.exit(f"linearized_decode: {' '.join(argv[5:9])} ... failed: {p.stderr.strip()[-500:]}")
        peak = read_gnu_time(t.name)[2]
    timing = json.loads(p.stdout.strip().splitlines()[-1])["timing"]
    if timing["prompt_tokens"] != prompt_tokens or timing["new_tokens"] != new_tokens:
        sys.exit(f"linearized_decode: {model} read {timing['prompt_tokens']} prompt tokens and made "
                 f"{timing['new_tokens']} (asked {prompt_tokens} and {new_tokens}); a longer text is needed")
    return {"prefill_s": timing["prefill_s"], "decode_s": timing["decode_s"], "peak_mib": peak}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompt-tokens", type=int, default=4000)
    p.add_argument("--short-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--transfer-steps", type=int, default=40)
    p.add_argument("--work", default=os.path.expanduser("~/.cache/attnkit/bench/linearized-decode"))
    p.add_argument("--report-only", action="store_true", help="re-render docs/analysis.md from the JSON")
    a = p.parse_args()
    if a.report_only:
        return render_from_json(JSON_PATH, DOC_PATH, BEGIN, END, markdown, "linearized_decode")
    attnkit = os.path.join(a.build, "attnkit")
    os.makedirs(a.work, exist_ok=True)
    teacher, student, train_text = prepare(attnkit, a.work, a.threads, a.transfer_steps)
    prompt = long_prompt(train_text, 2 * a.prompt_tokens)  # ~1.3 tokens per word: more than enough
    model = json.load(open(os.path.join(teacher, "config.json")))["model"]  # attnkit's format
    shape = {"layers": model["layers"], "heads": model["heads"],
             "kv_heads": model["attention"].get("kv_heads") or model["heads"],
             "head_dim": model["attention"].get("key_size") or model["hidden"] // model["heads"]}
    models = {"softmax (teacher)": teacher, f"{KIND} (student)": student}
    lengths = {"short": a.short_tokens, "long": a.prompt_tokens}
    runs = {m: {k: [] for k in lengths} for m in models}
    for _ in range(a.rounds):
        for name, model in models.items():
            for key, n in lengths.items():
                runs[name][key].append(measure(attnkit, model, a.threads, prompt, n, a.new_tokens))
    transfer = json.load(open(os.path.join(student, "transfer.json")))
    isa = "AVX-512" if "avx512f" in open("/proc/cpuinfo").read() else "AVX2 only"
    result = {
        "date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "isa": isa, "threads": a.threads,
        "rounds": a.rounds, "new_tokens": a.new_tokens, "prompt_tokens": lengths,
        "load_average_end": os.getloadavg()[0],
        "model": shape,
        "student": {"kind": KIND, "transfer_steps": a.transfer_steps,
                    "held_out_before": transfer["total"]["initial"], "held_out_after": transfer["total"]["final"]},
        "runs": runs,
    }
    write_json(JSON_PATH, result)
    print(markdown(result))
    replace_region(DOC_PATH, BEGIN, END, markdown(result))
    print("linearized_decode.py: wrote docs/linearized-decode.json and docs/analysis.md")


def markdown(r):
    """The docs/analysis.md region of a run, rendered from its JSON alone."""
    m = r["model"]
    short, long = r["prompt_tokens"]["short"], r["prompt_tokens"]["long"]
    n = r["new_tokens"]
    kv_mib = m["layers"] * 2 * m["kv_heads"] * m["head_dim"] * (long + n) * 4 / 2 ** 20
    features = 2 * m["head_dim"]  # hedgehog at M = head size: [softmax(Wx + b), softmax(-Wx - b)]
    state_mib = m["layers"] * m["heads"] * features * (m["head_dim"] + 1) * 4 / 2 ** 20
    s = r["student"]
    lines = [BEGIN, "",
             f"SmolLM2-135M-Instruct ({m['layers']} layers, {m['heads']} query heads in {m['kv_heads']} key/value "
             f"groups of head size {m['head_dim']}; float32) and its `{s['kind']}` student (every layer converted by "
             f"`attnkit linearize`, {s['transfer_steps']} attention-transfer steps, held-out transfer loss "
             f"{s['held_out_before']:.3f} → {s['held_out_after']:.3f}; not fine-tuned: this measures cost, not "
             f"quality). Greedy, {n} new tokens after a prompt of {short} or {long} tokens (English Bible verses), "
             f"so the last step attends over {short + n} or {long + n} positions; {r['threads']} thread(s), "
             f"{r['isa']}; {r['rounds']} rounds, one process per run, alternating; medians, [min, max] for the "
             f"ratios. The softmax KV cache at {long + n} positions is {kv_mib:.0f} MiB ({m['layers']} layers × 2 × "
             f"{m['kv_heads']} heads × {m['head_dim']} × {long + n} floats); the student's state is {state_mib:.1f} MiB "
             f"at any length ({m['layers']} layers × {m['heads']} query heads × {features} features × "
             f"({m['head_dim']} + 1) floats: the rotated numerator and the denominator sums). Run {r['date']} (load average "
             f"{r['load_average_end']:.2f} at the end) by `/usr/bin/python3 bench/linearized_decode.py --build build`.",
             "",
             f"| model | ms per new token, prompt {short} | ms per new token, prompt {long} | long / short | "
             f"prefill s, {long} tokens | peak RSS MiB, prompt {short} | peak RSS MiB, prompt {long} | growth MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for name, cell in r["runs"].items():
        per = {k: [1000 * x["decode_s"] / n for x in cell[k]] for k in ("short", "long")}
        ratios = [b / a for a, b in zip(per["short"], per["long"])]
        peak = {k: statistics.median(x["peak_mib"] for x in cell[k]) for k in ("short", "long")}
        lines.append(f"| {name} | {statistics.median(per['short']):.1f} | {statistics.median(per['long']):.1f} | "
                     f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}, {max(ratios):.2f}] | "
                     f"{statistics.median(x['prefill_s'] for x in cell['long']):.1f} | {peak['short']:.0f} | "
                     f"{peak['long']:.0f} | {peak['long'] - peak['short']:+.0f} |")
    lines += ["", END, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
