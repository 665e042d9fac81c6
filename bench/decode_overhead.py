#!/usr/bin/env python3
"""Per-token overhead of decoding: greedy ms/token of a tiny GPT-2-shaped model (2 layers, hidden
128, 2 heads, vocabulary 1000: the weights are 0.6 MB, so a step is almost all overhead) in
attnkit and in CTranslate2, on the same weights (bench/decode_ct2.py prepares them with a fixed
seed), after checking that both generate the same ids.

In `make bench` (bench/run.sh, 1 and 2 threads, 5 rounds); run with the python of
scripts/decode_bench_venv.sh (CTranslate2):
  PY=$(bash scripts/decode_bench_venv.sh)
  $PY bench/decode_overhead.py --build build [--baseline BUILD2] [--threads 1] [--repeats 5]

Per build, attnkit_bench_decode --mode greedy: decode::generate (what `attnkit generate` runs per
token) timed inside the process, --new-tokens tokens after a 16-token prompt, in ms per generated
token, the best and the median of --repeats fresh processes; and `attnkit generate` itself (the
CLI as users run it, --prompt-ids, --no-eos, --json) timed by its own --json "timing": prefill_s +
decode_s per new token (the decoding entry to the last token; not the process start or the load);
CTranslate2's Generator.generate_batch (float32) timed alike. Wall-time differences of whole
processes are not used: the process start varies by ±0.2 s here, more than 512 tokens take.
--baseline BUILD2 measures a second build the same way in the same run (e.g. the commit before a
change, built in a worktree), alternating the two builds' processes."""
import argparse
import json
import os
import sys

from bench_process import round_verdict, run_or_exit, thread_env

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = [880, 373, 500, 41, 167, 77, 324, 498, 294, 309, 427, 248, 137, 61, 319, 18]
SHAPE = ["--layers", "2", "--hidden", "128", "--heads", "2", "--vocab", "1000"]


def run(argv, env=None):
    return run_or_exit(argv, "decode_overhead", env)


def json_line(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")][0]


def in_process(build, model, a):
    out = json_line(run([os.path.join(build, "attnkit_bench_decode"), "--mode", "greedy",
                         "--kind", "softmax", *SHAPE, "--model", os.path.join(model, "hf"),
                         "--prompt", ",".join(map(str, PROMPT)), "--new-tokens",
                         str(a.new_tokens), "--threads", str(a.threads)], thread_env(a.threads)))
    return 1e3 / out["tokens_per_s"], out["ids"]


def cli(build, model, a):
    """ms per new token of `attnkit generate` by its own --json timing, and its ids. The model
    directory without its word-level tokenizer.json (made for CTranslate2's converter; attnkit
    reads no WordLevel model), as links: the prompt is ids anyway."""
    bare = os.path.join(model, "hf-without-tokenizer")
    os.makedirs(bare, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        if not os.path.exists(os.path.join(bare, name)):
            os.symlink(os.path.join(model, "hf", name), os.path.join(bare, name))
    doc = json.loads(run([os.path.join(build, "attnkit"), "--threads", str(a.threads), "--quiet",
                          "generate", "--model", bare, "--prompt-ids",
                          " ".join(map(str, PROMPT)), "--json", "--no-eos", "--max-new-tokens",
                          str(a.new_tokens)], thread_env(a.threads)).splitlines()[0])
    timing = doc["timing"]
    return 1e3 * (timing["prefill_s"] + timing["decode_s"]) / timing["new_tokens"], \
        doc["results"][0]["sequences"][0]["ids"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--baseline", default="", help="a second build directory, measured alike")
    parser.add_argument("--model-dir", default="~/.cache/attnkit/bench/decode-overhead")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    a = parser.parse_args()
    model = os.path.expanduser(a.model_dir)
    run([sys.executable, os.path.join(HERE, "decode_ct2.py"), "prepare", model, *SHAPE,
         "--positions", str(len(PROMPT) + a.new_tokens + 8)])
    builds = [("attnkit", a.build)] + ([("baseline", a.baseline)] if a.baseline else [])
    times = {name: [] for name, _ in builds}
    times.update({name + "-cli": [] for name, _ in builds})
    times["ct2"] = []
    ids = {}
    for _ in range(a.repeats):
        for name, build in builds:
            ms, got = in_process(build, model, a)
            times[name].append(ms)
            ids[name] = got
            ms, got = cli(build, model, a)
            times[name + "-cli"].append(ms)
            ids[name + "-cli"] = got
        ct2 = json_line(run([sys.executable, os.path.join(HERE, "decode_ct2.py"), "generate", model,
                             *SHAPE, "--prompt", ",".join(map(str, PROMPT)), "--new-tokens",
                             str(a.new_tokens), "--threads", str(a.threads)]))
        times["ct2"].append(1e3 / ct2["tokens_per_s"])
        ids["ct2"] = ct2["ids"]
    for name, got in ids.items():
        if got != ids["ct2"]:
            sys.exit(f"decode_overhead: {name} generated other ids than CTranslate2; no timings")
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    print(f"== per-token overhead: greedy, GPT-2 shape 2 layers x 128 wide, 2 heads, vocabulary "
          f"1000, {len(PROMPT)}-token prompt, {a.new_tokens} new tokens, batch 1, {a.threads} "
          f"thread(s), {a.repeats} processes each; {cpu}; load {os.getloadavg()[0]:.2f} ==")
    print("ids: equal in every run (attnkit and CTranslate2)")
    print("| implementation | ms/token, best | ms/token, median |")
    print("|---|---|---|")
    labels = {name: f"{name} ({build}, attnkit_bench_decode)" for name, build in builds}
    labels.update({name + "-cli": f"{name} ({build}, attnkit generate, its --json timing)"
                   for name, build in builds})
    labels["ct2"] = "CTranslate2 (float32)"
    for name in [n + s for n, _ in builds for s in ("", "-cli")] + ["ct2"]:
        t = sorted(times[name])
        print(f"| {labels[name]} | {t[0]:.3f} | {t[len(t) // 2]:.3f} |")
    # Issue 43's target: the per-token cost of `attnkit generate` at or below CTranslate2's, by the
    # rounds (each round ran attnkit's processes, then CTranslate2's).
    verdict, low, high = round_verdict(times["attnkit-cli"], times["ct2"])
    best = min(times["ct2"]) / min(times["attnkit-cli"])
    print(f"- target per-token cost <= CTranslate2's ({a.threads} thread(s), attnkit generate): best {best:.2f}x, "
          f"rounds {low:.2f}x-{high:.2f}x over {a.repeats}: {verdict.upper()}")


if __name__ == "__main__":
    main()
