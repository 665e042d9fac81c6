#!/usr/bin/env python3
"""The CTranslate2 peer of the decoding benchmark (bench/decode_compare.py), run with the python
of scripts/decode_bench_venv.sh (ctranslate2 + transformers over Debian's python3-torch 1.13).

  prepare DIR   builds the benchmark's GPT-2-small-shaped model once, with random weights from a
                fixed seed (transformers' GPT2LMHeadModel initialisation, torch.manual_seed(0)),
                and writes DIR/hf (Hugging Face layout: config.json, model.safetensors, and a
                word-level tokenizer "t0" … "t50255", "<|endoftext|>" that the converter needs
                for the vocabulary) and DIR/ct2 (CTranslate2's transformers converter, float32).
                attnkit (--model DIR/hf), the eager loop and CTranslate2 then run the same weights.
  generate DIR  greedy generation with ctranslate2.Generator (float32, intra_threads = --threads,
                inter_threads = 1, batch 1): --new-tokens tokens after --prompt ids; prints one
                JSON line with tokens/s, the generated ids and their summed log-probability."""
import argparse
import json
import os
import sys
import time

EOS = "<|endoftext|>"


def token_strings(vocab):
    return [f"t{i}" for i in range(vocab - 1)] + [EOS]


def prepare(a):
    done = os.path.join(a.dir, "done.json")
    want = {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "vocab": a.vocab,
            "positions": a.positions, "seed": 0}
    if os.path.exists(done):
        with open(done) as f:
            if json.load(f) == want:
                return
    import ctranslate2
    import tokenizers
    import torch
    import transformers

    hf = os.path.join(a.dir, "hf")
    os.makedirs(hf, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=a.vocab, n_positions=a.positions, n_embd=a.hidden,
                                     n_layer=a.layers, n_head=a.heads, bos_token_id=a.vocab - 1,
                                     eos_token_id=a.vocab - 1)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(hf, safe_serialization=True)
    vocab = {t: i for i, t in enumerate(token_strings(a.vocab))}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=EOS))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(hf, "tokenizer.json"))
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS,
                   "eos_token": EOS, "unk_token": EOS}, f)
    converter = ctranslate2.converters.TransformersConverter(hf)
    converter.convert(os.path.join(a.dir, "ct2"), quantization="float32", force=True)
    with open(done + ".tmp", "w") as f:
        json.dump(want, f)
    os.replace(done + ".tmp", done)


def generate(a):
    import ctranslate2

    generator = ctranslate2.Generator(os.path.join(a.dir, "ct2"), device="cpu",
                                      compute_type="float32", inter_threads=1,
                                      intra_threads=a.threads)
    strings = token_strings(a.vocab)
    prompt = [strings[int(i)] for i in a.prompt.split(",")]

    def run(n):
        # sampling_topk=1: greedy (argmax); end_token=[]: no end token, so exactly n tokens
        # (attnkit's run has no EOS either).
        out = generator.generate_batch([prompt], max_length=n, sampling_topk=1, beam_size=1,
                                       include_prompt_in_result=False, end_token=[],
                                       return_scores=True)
        # CTranslate2's score is the mean log-probability (length normalised): make it the sum.
        ids = out[0].sequences_ids[0]
        return ids, out[0].scores[0] * len(ids)

    run(4)  # warm-up
    t0 = time.perf_counter()
    ids, score = run(a.new_tokens)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"mode": "greedy", "peer": f"CTranslate2 {ctranslate2.__version__}",
                      "new_tokens": len(ids), "seconds": elapsed,
                      "tokens_per_s": len(ids) / elapsed, "ids": ids, "score": score, "threads": a.threads}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["prepare", "generate"])
    parser.add_argument("dir")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", default="")
    parser.add_argument("--new-tokens", type=int, default=128)
    a = parser.parse_args()
    if a.command == "prepare":
        prepare(a)
    else:
        if not a.prompt:
            sys.exit("decode_ct2.py generate: give --prompt ids")
        generate(a)


if __name__ == "__main__":
    main()
