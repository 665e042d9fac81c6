#!/usr/bin/env python3
"""int8 against float32 decoding on one causal LM (docs/decoding.md "int8"): the share of greedy ids
equal to float32's, perplexity on a text, both through the attnkit CLI.

  int8_quality.py --attnkit build/attnkit --float MODEL --int8 MODEL --tokenizer tokenizer.json
                  --text FILE [--threads 2] [--new-tokens 64] [--window 128]

--float and --int8 are anything `attnkit generate --model` reads (a .gguf file, a directory of
`attnkit convert --quantize int8`); --int8-flag adds `--compute-type int8` to the int8 side
instead (quantizing at load). Perplexity: the text's lines joined by newlines, tokenized with the
tokenizer (Hugging Face tokenizers), cut into windows of --window tokens, each run through
`attnkit encode` (logits [1, n, vocab]); exp of the mean next-token cross entropy over all
windows. Run with a python that has tokenizers, safetensors and numpy (the test venv).

--simulate HF_DIR adds the same scheme simulated in float in transformers (torch and transformers:
the test venv) on the same windows: every nn.Linear's weight quantized per output row and its
input per row at every call, the head untied and quantized too, values rounded as attnkit rounds
them (half-even of x · (127 / max|row|), the quotient a true float division). --perturb SEED
multiplies the word embeddings of both int8 sides by (1 + 1e-6 · N(0, 1)) (numpy's generator with
SEED; attnkit's through a perturbed copy of the --int8 directory): a change far below float32
rounding of the outputs that shows how far the perplexity of one int8 realisation moves."""
import argparse
import json
import math
import os
import shutil
import subprocess
import tempfile

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

PROMPTS = [
    "The history of the Roman Empire",
    "Here is a simple recipe for bread:",
    "def fibonacci(n):",
    "The three laws of thermodynamics are",
    "Once upon a time, in a small village by the sea,",
]


def generate(a, model, extra, ids):
    cmd = [a.attnkit, "--threads", str(a.threads), "--quiet", "generate", "--model", model,
           "--prompt-ids", " ".join(map(str, ids)), "--max-new-tokens", str(a.new_tokens),
           "--no-eos", "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["results"][0]["sequences"][0]["ids"]


def nll(a, model, extra, windows, tmp):
    total, count = 0.0, 0
    for k, w in enumerate(windows):
        path = os.path.join(tmp, f"w{k}.safetensors")
        cmd = [a.attnkit, "--threads", str(a.threads), "--quiet", "encode", "--model", model,
               "--ids", " ".join(map(str, w)), "--output", path] + extra
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        logits = load_file(path)["logits"][0].astype(np.float64)
        z = logits[:-1]
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        total -= logp[np.arange(len(w) - 1), w[1:]].sum()
        count += len(w) - 1
    return total / count, count


def perturb_embeddings(values, seed):
    rng = np.random.default_rng(seed)
    return (values * (1 + 1e-6 * rng.standard_normal(values.shape))).astype(np.float32)


def perturbed_copy(model, seed, tmp):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    out = os.path.join(tmp, "perturbed")
    os.makedirs(out)
    path = os.path.join(model, "model.safetensors")
    with safe_open(path, "np") as f:
        metadata = f.metadata()
    tensors = load_file(path)
    name = "transformer.embeddings.token.weight"
    tensors[name] = perturb_embeddings(tensors[name], seed)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata=metadata)
    for extra in os.listdir(model):
        if extra != "model.safetensors":
            shutil.copy(os.path.join(model, extra), out)
    return out


def simulate(hf_dir, windows, seed):
    import torch
    from transformers import AutoModelForCausalLM

    def q_rows(x):
        amax = x.abs().amax(-1, keepdim=True)
        q = torch.round(x * (torch.full_like(amax, 127.0) / amax.clamp_min(1e-30))).clamp(-127, 127)
        return torch.where(amax > 0, q, torch.zeros_like(x)) * (amax / 127)

    def perplexity(model):
        total, count = 0.0, 0
        with torch.no_grad():
            for w in windows:
                logp = torch.log_softmax(model(torch.tensor([w])).logits[0, :-1].double(), -1)
                total -= logp[torch.arange(len(w) - 1), torch.tensor(w[1:])].sum().item()
                count += len(w) - 1
        return math.exp(total / count)

    model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    float_ppl = perplexity(model)
    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone())  # untied: quantized alone
    if seed is not None:
        emb = model.get_input_embeddings().weight
        emb.data = torch.from_numpy(perturb_embeddings(emb.detach().numpy(), seed))
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            weight = q_rows(module.weight.detach())
            module.forward = (lambda x, w=weight, b=module.bias:
                              torch.nn.functional.linear(q_rows(x), w, b))
    return float_ppl, perplexity(model)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attnkit", required=True)
    p.add_argument("--float", dest="float_model", required=True)
    p.add_argument("--int8", dest="int8_model", required=True)
    p.add_argument("--int8-flag", action="store_true")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--simulate", metavar="HF_DIR")
    p.add_argument("--perturb", type=int, metavar="SEED")
    p.add_argument("--skip-greedy", action="store_true")
    a = p.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    int8_extra = ["--compute-type", "int8"] if a.int8_flag else []
    same = total = 0
    first_diff = []
    for prompt in [] if a.skip_greedy else PROMPTS:
        ids = tok.encode(prompt).ids
        f = generate(a, a.float_model, [], ids)
        q = generate(a, a.int8_model, int8_extra, ids)
        same += sum(x == y for x, y in zip(f, q))
        total += len(f)
        first_diff.append(next((i for i, (x, y) in enumerate(zip(f, q)) if x != y), len(f)))
    with open(a.text) as fh:
        text = "\n".join(line.rstrip("\n") for line in fh if line.strip())
    ids = tok.encode(text).ids
    windows = [ids[i:i + a.window] for i in range(0, len(ids) - a.window + 1, a.window)]
    extra = {}
    with tempfile.TemporaryDirectory() as tmp:
        f_nll, n = nll(a, a.float_model, [], windows, tmp)
        # encode has no --compute-type: the int8 side must be a converted (int8) model here.
        int8_model = a.int8_model if a.perturb is None else perturbed_copy(a.int8_model, a.perturb, tmp)
        q_nll, _ = nll(a, int8_model, [], windows, tmp)
    if a.simulate:
        s_float, s_int8 = simulate(a.simulate, windows, a.perturb)
        extra = {"simulated_perplexity_float32": s_float, "simulated_perplexity_int8": s_int8}
    if a.perturb is not None:
        extra["perturb_seed"] = a.perturb
    print(json.dumps({
        **extra,
        "greedy_equal_share": same / total if total else None, "greedy_ids": total,
        "first_difference_per_prompt": first_diff,
        "perplexity_float32": math.exp(f_nll), "perplexity_int8": math.exp(q_nll),
        "perplexity_ratio": math.exp(q_nll - f_nll), "tokens_scored": n,
        "windows": len(windows), "window": a.window, "threads": a.threads}))


if __name__ == "__main__":
    main()
