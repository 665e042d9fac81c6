"""Hugging Face models on CPU: attn_implementation="sdpa" against "attnkit" (issue 31, section 3).

Run with the Python package's venv (scripts/python_package_venv.sh) after `pip install .` into
it; bench/run.sh does both at the end of `make bench`:

    ~/.cache/attnkit/venv-py/bin/python bench/hf_attention_compare.py [--quick] [--threads 2]

Models: random weights made by transformers from configs -- GPT2Config() defaults (GPT-2 small:
12 layers, 12 heads, hidden 768) with n_positions raised from 1024 to 2048 so that n = 2048 fits,
and BertConfig() defaults (BERT-base: 12 layers, 12 heads, hidden 768; max_position_embeddings
raised to 2048 the same way). float32, batch 1 (--batch), torch.set_num_threads(--threads).

Cases, all in this one process, both implementations on the same weights and the same inputs:
  - forward (prefill), eval mode under torch.inference_mode(), no padding mask: GPT2LMHeadModel
    with use_cache=False and logits_to_keep=1 (the last position's logits, as generate's prefill
    computes them) and BertModel, at n = 256, 512, 1024, 2048;
  - one training step (zero_grad, forward, backward, AdamW step), train mode with dropout 0 (so
    both sides compute the same function): GPT2LMHeadModel with labels = inputs and
    BertForMaskedLM with labels = inputs, at n = 512 (--train-n).
Before timing, the outputs (forward: logits / last hidden state; training: the loss of the first
step, from equal weights) are compared and max |difference| is reported. Timing: --warmup calls
of each implementation, then --repeats rounds, each round one call of each implementation in
alternating order (sdpa first in even rounds, attnkit first in odd ones); the median per
implementation is reported, and ratio = sdpa median / attnkit median (> 1: attnkit faster).

Targets (issue 31): forward ratio >= 1.2 at n >= 1024; never slower than sdpa (ratio >= 1.0) at
n >= 256 (checked on every case, training included). Prints a table and one JSON line per case.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import time

import torch

try:
    import transformers
    import attnkit.transformers
except ImportError as error:  # pragma: no cover - depends on the environment
    sys.exit(f"hf_attention_compare.py: {error} (run with the venv of "
             "scripts/python_package_venv.sh after `pip install .`)")

IMPLS = ("sdpa", "attnkit")


def configs(family: str):
    if family == "gpt2":
        return transformers.GPT2Config(n_positions=2048, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0)
    return transformers.BertConfig(max_position_embeddings=2048, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0)


def make_pair(family: str, training: bool):
    """Two models with equal weights, one per implementation."""
    if family == "gpt2":
        cls = transformers.GPT2LMHeadModel
    else:
        cls = transformers.BertForMaskedLM if training else transformers.BertModel
    config = configs(family)
    torch.manual_seed(0)
    models = {}
    for impl in IMPLS:
        models[impl] = cls._from_config(copy.deepcopy(config), attn_implementation=impl)
        assert models[impl].config._attn_implementation == impl
    models["attnkit"].load_state_dict(models["sdpa"].state_dict())
    for model in models.values():
        model.train(training)
    return models, config.vocab_size


def forward_fn(family, model, ids):
    if family == "gpt2":
        return lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    return lambda: model(input_ids=ids).last_hidden_state


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def alternate(fns, warmup, repeats):
    """fns: {impl: callable}. Median seconds per impl, calls alternating in order per round."""
    for _ in range(warmup):
        for impl in IMPLS:
            fns[impl]()
    samples = {impl: [] for impl in IMPLS}
    for r in range(repeats):
        for impl in (IMPLS if r % 2 == 0 else IMPLS[::-1]):
            samples[impl].append(timed(fns[impl]))
    return {impl: statistics.median(s) for impl, s in samples.items()}, samples


def bench_forward(family, ns, args, results):
    models, vocab = make_pair(family, training=False)
    for n in ns:
        torch.manual_seed(n)
        ids = torch.randint(0, vocab, (args.batch, n))
        fns = {impl: forward_fn(family, models[impl], ids) for impl in IMPLS}
        with torch.inference_mode():
            ref, ours = fns["sdpa"](), fns["attnkit"]()
            diff = (ours - ref).abs().max().item()
            scale = max(1.0, ref.abs().max().item())
            median, samples = alternate(fns, args.warmup, args.repeats)
        results.append(case(family, "forward", n, args, median, samples, diff, scale))
        print_row(results[-1])
    del models
    gc.collect()


def bench_train(family, ns, args, results):
    models, vocab = make_pair(family, training=True)
    optims = {impl: torch.optim.AdamW(models[impl].parameters(), lr=1e-5) for impl in IMPLS}
    for n in ns:
        torch.manual_seed(n)
        ids = torch.randint(0, vocab, (args.batch, n))

        def step(impl, ids=ids):
            optims[impl].zero_grad(set_to_none=True)
            loss = models[impl](input_ids=ids, labels=ids).loss
            loss.backward()
            optims[impl].step()
            return loss.detach()

        # The first step runs from equal weights (the first n only): the losses are compared.
        losses = {impl: step(impl) for impl in IMPLS}
        diff = (losses["attnkit"] - losses["sdpa"]).abs().item()
        scale = max(1.0, losses["sdpa"].abs().item())
        fns = {impl: (lambda impl=impl: step(impl)) for impl in IMPLS}
        median, samples = alternate(fns, max(0, args.warmup - 1), args.train_repeats)
        results.append(case(family, "train step", n, args, median, samples, diff, scale))
        print_row(results[-1])
    del models, optims
    gc.collect()


def case(family, mode, n, args, median, samples, diff, scale):
    ratio = median["sdpa"] / median["attnkit"]
    tolerance = 1e-3 * scale
    targets = []
    if n >= 256:
        targets.append(("not slower (>= 1.0x)", ratio >= 1.0))
    if mode == "forward" and n >= 1024:
        targets.append((">= 1.2x", ratio >= 1.2))
    return {
        "model": "GPT-2 small" if family == "gpt2" else "BERT-base",
        "mode": mode, "n": n, "batch": args.batch, "threads": torch.get_num_threads(),
        "sdpa_ms": round(median["sdpa"] * 1e3, 1), "attnkit_ms": round(median["attnkit"] * 1e3, 1),
        "ratio": round(ratio, 3),
        "samples_ms": {impl: [round(s * 1e3, 1) for s in samples[impl]] for impl in IMPLS},
        "max_abs_diff": diff, "diff_ok": diff <= tolerance,
        "targets": {name: met for name, met in targets},
    }


HEADER = ("| model | mode | n | sdpa ms | attnkit ms | sdpa / attnkit | max abs diff | targets |\n"
          "|---|---|---|---|---|---|---|---|")


def target_text(result):
    parts = [f"{name} {'met' if met else 'MISSED'}" for name, met in result["targets"].items()]
    return "; ".join(parts) or "-"


def print_row(result):
    print(f"| {result['model']} | {result['mode']} | {result['n']} | {result['sdpa_ms']} | "
          f"{result['attnkit_ms']} | {result['ratio']:.2f}x | {result['max_abs_diff']:.1e}"
          f"{'' if result['diff_ok'] else ' (TOO LARGE)'} | {target_text(result)} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--n", type=int, nargs="+", default=[256, 512, 1024, 2048],
                        help="forward lengths (default 256 512 1024 2048)")
    parser.add_argument("--train-n", type=int, nargs="*", default=[512],
                        help="training-step lengths (default 512; none to skip)")
    parser.add_argument("--models", nargs="+", choices=["gpt2", "bert"], default=["gpt2", "bert"])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="forward rounds (default 5)")
    parser.add_argument("--train-repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="n 256 and 1024, training at 256, 3 rounds (a smoke run)")
    args, _ = parser.parse_known_args()  # bench/run.sh passes compare.py's options through
    if args.quick:
        args.n, args.train_n, args.repeats, args.train_repeats = [256, 1024], [256], 3, 2
    if max(args.n + args.train_n) > 2048:
        parser.error("n at most 2048 (the configs' position tables)")
    torch.set_num_threads(args.threads)
    attnkit.transformers.register()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads "
          f"{torch.get_num_threads()}, batch {args.batch}, float32, load average (1 min) at start "
          f"{load:.2f} on {os.cpu_count()} CPUs")
    print(HEADER, flush=True)
    results = []
    start = time.perf_counter()
    for family in args.models:
        bench_forward(family, args.n, args, results)
        if args.train_n:
            bench_train(family, args.train_n, args, results)
    print(f"({time.perf_counter() - start:.0f} s; load average (1 min) at the end "
          f"{os.getloadavg()[0]:.2f})")
    for result in results:
        print("HF_ATTENTION_JSON " + json.dumps(result))
    checks = [met for r in results for met in r["targets"].values()]
    missed = [r for r in results if not all(r["targets"].values())]
    print(f"targets: {checks.count(True)} of {len(checks)} met"
          + (f"; missed in {len(missed)} case(s)" if missed else ""))
    bad = [r for r in results if not r["diff_ok"]]
    if bad:
        print(f"hf_attention_compare.py: outputs differ beyond 1e-3 in {len(bad)} case(s)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
