#!/usr/bin/env python3
"""CTranslate2's greedy decoding speed on a converted causal LM (docs/decoding.md "int8"):
  int8_ct2.py CT2_DIR --tokenizer tokenizer.json --prompt TEXT --new-tokens 64 --threads 1
              --compute-type int8 [--repeats 3]
batch 1, sampling_topk=1 (greedy), no end token (exactly --new-tokens tokens), intra_threads =
--threads; prints one JSON line with the best of --repeats timed runs (after one warm-up) and the
ids. Run with the python of ~/.cache/attnkit/venv-decode-bench (ctranslate2 4.6.0).

  int8_ct2.py CT2_DIR --tokenizer tokenizer.json --perplexity FILE [--window 128] --threads 1
              --compute-type int8
perplexity on a text instead, as bench/int8_quality.py measures it: the file's non-empty lines
joined by newlines, tokenized, cut into windows of --window tokens; Generator.score_batch gives
the log-probability of every token of a window after its first; exp of the mean negative
log-probability over all windows."""
import argparse
import json
import math
import time

import ctranslate2
from tokenizers import Tokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--prompt")
    p.add_argument("--perplexity", metavar="FILE")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compute-type", default="int8")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    if (a.prompt is None) == (a.perplexity is None):
        p.error("give --prompt (speed) or --perplexity FILE")
    tok = Tokenizer.from_file(a.tokenizer)
    g = ctranslate2.Generator(a.model, device="cpu", compute_type=a.compute_type,
                              inter_threads=1, intra_threads=a.threads)
    if a.perplexity is not None:
        return perplexity(a, tok, g)
    tokens = tok.encode(a.prompt).tokens

    def run(n):
        out = g.generate_batch([tokens], max_length=n, sampling_topk=1, beam_size=1,
                               include_prompt_in_result=False, end_token=[])
        return out[0].sequences_ids[0]

    run(4)
    best = float("inf")
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        ids = run(a.new_tokens)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"peer": f"CTranslate2 {ctranslate2.__version__}", "compute_type": a.compute_type,
                      "threads": a.threads, "new_tokens": len(ids), "seconds": best,
                      "tokens_per_s": len(ids) / best, "ids": ids}))


def perplexity(a, tok, g):
    with open(a.perplexity) as fh:
        text = "\n".join(line.rstrip("\n") for line in fh if line.strip())
    enc = tok.encode(text)
    ids, tokens = enc.ids, enc.tokens
    starts = range(0, len(ids) - a.window + 1, a.window)
    total, count = 0.0, 0
    for s in starts:
        result = g.score_batch([tokens[s:s + a.window]])[0]
        if len(result.log_probs) != a.window - 1:
            raise SystemExit(f"score_batch gave {len(result.log_probs)} log-probabilities for a "
                             f"window of {a.window} tokens (expected {a.window - 1})")
        total -= sum(result.log_probs)
        count += len(result.log_probs)
    print(json.dumps({"peer": f"CTranslate2 {ctranslate2.__version__}", "compute_type": a.compute_type,
                      "perplexity": math.exp(total / count), "tokens_scored": count,
                      "windows": len(starts), "window": a.window}))


if __name__ == "__main__":
    main()
