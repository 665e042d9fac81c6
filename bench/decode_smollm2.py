#!/usr/bin/env python3
"""make bench, SmolLM2 part (issue 42 item 9): SmolLM2-135M-Instruct from its GGUF file (Q4_1
linear layers, Q8_0 embedding; ~/.cache/attnkit/weights/smollm2-135m-instruct.gguf, fetched by
scripts/setup.sh) decoded by `attnkit generate` in float32 (the weights dequantized at load)
against CTranslate2 (float32), llama.cpp (llama-cpp-python, on an F32 GGUF of the same dequantized
weights and on the Q4_1 file itself) and, for the prefill, transformers' sdpa (PyTorch 2.x,
float32). Run with the python of scripts/decode_bench_venv.sh (ctranslate2 4.6.0, transformers
4.38.2 over Debian's python3-torch 1.13), as bench/run.sh does:
  PY=$(bash scripts/decode_bench_venv.sh)
  $PY bench/decode_smollm2.py --build build [--llama-python $(bash scripts/llamacpp_bench_venv.sh)]
      [--sdpa-python $(bash scripts/python_package_venv.sh)] [--quick] [--threads T] [--repeats R]

Prepared once into --dir (default ~/.cache/attnkit/bench/smollm2): hf/ (`attnkit convert --from
FILE.gguf --to hf --format huggingface`), ct2/ (CTranslate2's TransformersConverter of hf/,
float32), f32.gguf (the GGUF file with every tensor dequantized to F32 by the `gguf` package,
run with --sdpa-python, whose venv has it; metadata copied, general.file_type ALL_F32).

Decoding (greedy batch 1 and beam 4, --new-tokens, default 128, 1 and 2 threads): the prompt is
one chat turn (PROMPT) tokenized once by attnkit; every side gets these ids. No side stops at an
end token (attnkit --no-eos, CTranslate2 end_token=[], llama.cpp's loop takes exactly N tokens),
so every side decodes N tokens. Before the table the ids are compared with attnkit's: agreement
is reported (equal, or the first position that differs; float32 sums in another order may flip
a near tie and then the continuations part), and the timings are printed either way.
  attnkit   `attnkit --threads T generate --model FILE.gguf --prompt-ids IDS --json --no-eos
            --max-new-tokens N --strategy greedy|beam --beams 4`, one process per run; its time is
            the process's own prefill_s + decode_s (--json "timing", measured inside the process:
            from the decoding entry to the last token, no load), without a warm-up.
  CTranslate2  Generator(compute_type float32 | int8, intra_threads T, inter_threads 1),
            generate_batch(sampling_topk 1 | beam_size 4, length_penalty 1, max_length N,
            end_token [], include_prompt_in_result False), one process per thread count, one
            warm-up call, then the timed calls.
  llama.cpp Llama(n_ctx prompt + N + 8, n_batch 512, n_threads = n_threads_batch = T), greedy
            (generate(temp 0, top_k 1, repeat_penalty 1)), on f32.gguf with an F32 KV cache
            (type_k = type_v = F32: float32 like the others) and on the Q4_1 file with llama.cpp's
            defaults (F16 KV cache); one warm-up, then the timed calls. llama.cpp has no beam
            search (llama-cpp-python none either): beam 4 has no llama.cpp column.
Compute types (--compute-types, default float32,int8): the int8 cells run attnkit `generate
--compute-type int8` against CTranslate2 compute_type int8 on the same float32 files (each quantizes
the weights per output row as it loads, activations per row at run time); their ids are compared
with CTranslate2 int8's and with attnkit's float32 ids (reported, not required); llama.cpp has no
int8 column (its Q8_0 is another scheme: blocks of 32 with their own scales).
Prefill (--prefill-n, default 2048 tokens of Debian's English fortunes, tokenized by attnkit; 1
and 2 threads): attnkit's prefill_s of `generate --max-new-tokens 1` (one forward over the
prompt to the first token's logits); transformers (--sdpa-python: torch 2.x + transformers 5.x)
AutoModelForCausalLM.from_pretrained(hf/, attn_implementation "sdpa", dtype float32), one
forward model(ids, logits_to_keep=1) under torch.inference_mode() with torch.set_num_threads(T),
after a 64-token warm-up; llama.cpp on f32.gguf: eval of the prompt (n_batch 2048, n_ubatch 512,
F32 KV cache). The first next token of every side is compared with attnkit's.
Every cell is timed --repeats times (default 3, --quick 1) on every side and the fastest kept.
Every process gets OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = T.
A full run (not --quick) writes docs/decode-smollm2.json and its tables in docs/decoding.md (between
the decode-smollm2 markers; tests/python/test_docs_tables.py checks that the two agree);
`$PY bench/decode_smollm2.py report` re-renders them from the JSON."""
import argparse
import datetime
import json
import os
import sys
import time

from bench_process import ct2_target_line, load_averages, machine_isa, run_or_exit, thread_env  # thread_env: OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = T
from gnu_time import render_from_json, replace_region, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GGUF = "~/.cache/attnkit/weights/smollm2-135m-instruct.gguf"
PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nWrite a short story about a lighthouse keeper who "
          "finds a message in a bottle.<|im_end|>\n<|im_start|>assistant\n")
FORMAT = 1  # of the prepared directory
JSON_PATH = os.path.join(ROOT, "docs", "decode-smollm2.json")
DOC_PATH = os.path.join(ROOT, "docs", "decoding.md")
BEGIN, END = "<!-- decode-smollm2:begin -->", "<!-- decode-smollm2:end -->"


# --- helpers -------------------------------------------------------------------------------------

def run(argv, env=None):
    return run_or_exit(argv, "decode_smollm2", env)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]




# --- prepare -------------------------------------------------------------------------------------

def write_f32_gguf(source, target):
    """source's GGUF with every tensor dequantized to F32 by the gguf package (its metadata copied,
    general.file_type ALL_F32). Runs where `gguf` imports (the Python package venv)."""
    import gguf
    import numpy as np
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(target + ".tmp", arch=reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            writer.add_uint32(name, int(gguf.LlamaFileType.ALL_F32))
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(target + ".tmp", target)


def prepare(a):
    done = os.path.join(a.dir, "done.json")
    st = os.stat(a.gguf)
    want = {"gguf": a.gguf, "size": st.st_size, "mtime": int(st.st_mtime), "format": FORMAT,
            "f32": bool(a.sdpa_python)}
    if os.path.exists(done):
        with open(done) as f:
            if json.load(f) == want:
                return
    t0 = time.perf_counter()
    os.makedirs(a.dir, exist_ok=True)
    hf = os.path.join(a.dir, "hf")
    run([os.path.join(a.build, "attnkit"), "--quiet", "convert", "--from", a.gguf, "--to", hf,
         "--format", "huggingface"])
    # The converter reads the vocabulary through this venv's tokenizers 0.15, which takes BPE
    # merges as "a b" strings only: a copy of hf/ whose tokenizer.json has them so.
    old = os.path.join(a.dir, "hf-merges-as-strings")
    os.makedirs(old, exist_ok=True)
    for name in os.listdir(hf):
        if name != "tokenizer.json" and not os.path.exists(os.path.join(old, name)):
            os.symlink(os.path.join(hf, name), os.path.join(old, name))
    with open(os.path.join(hf, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = json.load(f)
    merges = tokenizer["model"].get("merges", [])
    tokenizer["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in merges]
    with open(os.path.join(old, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    import ctranslate2
    ctranslate2.converters.TransformersConverter(old).convert(
        os.path.join(a.dir, "ct2"), quantization="float32", force=True)
    if a.sdpa_python:
        run([a.sdpa_python, os.path.abspath(__file__), "f32gguf", "--gguf", a.gguf, "--dir", a.dir])
    with open(done + ".tmp", "w") as f:
        json.dump(want, f)
    os.replace(done + ".tmp", done)
    print(f"prepared {a.dir} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


# --- the peers (one process per engine and thread count) ------------------------------------------

def best_of(repeats, fn):
    """(fastest seconds, least CPU seconds of the process, the last result) of `repeats` timed
    calls of fn."""
    best, best_cpu, out = None, None, None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = seconds if best is None else min(best, seconds)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    return best, best_cpu, out


def peer_ct2(a, cells):
    import ctranslate2
    # int8: the float32 conversion quantized as it loads (per-row int8 weights, as a
    # `--quantization int8` conversion gives), as attnkit's --compute-type int8 quantizes.
    generator = ctranslate2.Generator(os.path.join(a.dir, "ct2"), device="cpu", compute_type=a.compute_type,
                                      inter_threads=1, intra_threads=a.threads)
    vocab_file = os.path.join(a.dir, "ct2", "vocabulary")
    if os.path.exists(vocab_file + ".json"):
        with open(vocab_file + ".json", encoding="utf-8") as f:
            vocab = json.load(f)
    else:
        with open(vocab_file + ".txt", encoding="utf-8") as f:
            vocab = f.read().split("\n")
    for cell in cells:
        prompt = [vocab[i] for i in cell["prompt"]]

        def generate(n=cell["new_tokens"]):
            out = generator.generate_batch([prompt], max_length=n, beam_size=cell["beams"],
                                           sampling_topk=1, length_penalty=1.0, end_token=[],
                                           include_prompt_in_result=False, return_scores=True)
            return out[0].sequences_ids[0], out[0].scores[0]

        generate(4)  # warm-up
        seconds, cpu, (ids, score) = best_of(a.repeats, generate)
        print(json.dumps({"engine": "ct2", "peer": f"CTranslate2 {ctranslate2.__version__}",
                          "beams": cell["beams"], "seconds": seconds, "cpu": cpu, "ids": ids,
                          "score": score}), flush=True)


def peer_llamacpp(a, cells):
    import llama_cpp
    import numpy as np
    name = f"llama.cpp (llama-cpp-python {llama_cpp.__version__})"
    for file, label, f32_cache in ((os.path.join(a.dir, "f32.gguf"), "F32", True), (a.gguf, "Q4_1", False)):
        if not os.path.exists(file):
            continue
        for cell in cells:
            n, prompt = cell["new_tokens"], cell["prompt"]
            kv = dict(type_k=0, type_v=0) if f32_cache else {}  # GGML_TYPE_F32
            prefill = cell.get("prefill", False)
            llm = llama_cpp.Llama(model_path=file, n_ctx=len(prompt) + n + 8,
                                  n_batch=2048 if prefill else 512, n_ubatch=512,
                                  n_threads=a.threads, n_threads_batch=a.threads, verbose=False, **kv)
            if prefill:
                if not f32_cache:
                    continue

                def forward():
                    llm.reset()
                    llm.eval(prompt)
                    # The last token's logits (llama-cpp-python 0.3 fills llm.scores only with
                    # logits_all, which would compute the head at every position).
                    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
                    return int(logits.argmax())

                forward()  # warm-up
                seconds, cpu, first = best_of(a.repeats, forward)
                print(json.dumps({"engine": "llamacpp", "peer": name, "weights": label, "prefill": True,
                                  "seconds": seconds, "cpu": cpu, "first": first, "n": len(prompt)}),
                      flush=True)
                continue

            def generate(n=n):
                llm.reset()
                ids = []
                for token in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                          repeat_penalty=1.0, reset=True):
                    ids.append(int(token))
                    if len(ids) == n:
                        break
                return ids

            generate(4)  # warm-up
            seconds, cpu, ids = best_of(a.repeats, generate)
            print(json.dumps({"engine": "llamacpp", "peer": name, "weights": label, "beams": 1,
                              "seconds": seconds, "cpu": cpu, "ids": ids, "kv_cache": "F32" if f32_cache else "F16"}),
                  flush=True)


def peer_sdpa(a, cells):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(a.dir, "hf"), attn_implementation="sdpa",
                                                 dtype=torch.float32).eval()
    for cell in cells:
        ids = torch.tensor([cell["prompt"]])
        with torch.inference_mode():
            model(ids[:, :64], logits_to_keep=1)  # warm-up

            def forward():
                with torch.inference_mode():
                    return int(model(ids, logits_to_keep=1).logits[0, -1].argmax())

            seconds, cpu, first = best_of(a.repeats, forward)
        print(json.dumps({"engine": "sdpa", "prefill": True, "seconds": seconds, "cpu": cpu, "first": first,
                          "n": len(cell["prompt"]), "threads": torch.get_num_threads(),
                          "peer": f"transformers {transformers.__version__} sdpa (torch {torch.__version__})"}),
              flush=True)


# --- attnkit --------------------------------------------------------------------------------------

def attnkit(a, threads, prompt, new_tokens, beams, repeats, compute_type="float32"):
    """{"seconds": prefill_s + decode_s, "cpu": the CPU seconds of both, "prefill", "prefill_cpu"},
    each the least of `repeats` processes, "prefill_slowest" (the most), and the last JSON."""
    argv = [os.path.join(a.build, "attnkit"), "--threads", str(threads), "--quiet", "generate",
            "--model", a.gguf, "--prompt-ids", " ".join(map(str, prompt)), "--json", "--no-eos",
            "--max-new-tokens", str(new_tokens), "--strategy", "greedy" if beams == 1 else "beam",
            "--beams", str(max(beams, 1)), "--compute-type", compute_type]
    best, doc, slowest_prefill = {}, None, 0.0
    for _ in range(repeats):
        doc = json.loads(run(argv, thread_env(threads)).splitlines()[0])
        t = doc["timing"]
        if t["new_tokens"] != new_tokens or t["prompt_tokens"] != len(prompt):
            sys.exit(f"decode_smollm2: attnkit generated {t['new_tokens']} tokens for {len(prompt)} "
                     f"prompt ids, not {new_tokens} for {len(prompt)}")
        now = {"seconds": t["prefill_s"] + t["decode_s"], "cpu": t["prefill_cpu_s"] + t["decode_cpu_s"],
               "prefill": t["prefill_s"], "prefill_cpu": t["prefill_cpu_s"]}
        best = {k: min(v, best.get(k, v)) for k, v in now.items()}
        slowest_prefill = max(slowest_prefill, t["prefill_s"])
    best["prefill_slowest"] = slowest_prefill
    return best, doc


def prompt_ids(a, text):
    doc = json.loads(run([os.path.join(a.build, "attnkit"), "--quiet", "generate", "--model", a.gguf,
                          "--prompt", text, "--max-new-tokens", "0", "--json"]).splitlines()[0])
    return doc["results"][0]["prompt_ids"]


def fortunes_text(chars):
    root = "/usr/share/games/fortunes"
    text = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if "." in name or not os.path.isfile(full) or name in ("chinese", "tang300", "song100", "ascii-art", "art"):
            continue
        with open(full, encoding="utf-8", errors="replace") as f:
            text.append("".join(c for c in f.read() if c >= " " or c == "\n").replace("\n%\n", "\n\n"))
        if sum(map(len, text)) >= chars:
            break
    return "".join(text)[:chars]


def agreement(mine, theirs):
    """'equal (N ids)' or where the two id lists first part."""
    if mine == theirs:
        return f"equal ({len(mine)} ids)"
    first = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), min(len(mine), len(theirs)))
    same = sum(x == y for x, y in zip(mine, theirs))
    return f"first {first} of {len(mine)} ids equal, then they part ({same} positions equal in all)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "prepare", "peer", "f32gguf", "report"])
    parser.add_argument("--build", default="build")
    parser.add_argument("--gguf", default=GGUF)
    parser.add_argument("--dir", default="~/.cache/attnkit/bench/smollm2")
    parser.add_argument("--quick", action="store_true", help="2 threads, 32 new tokens, prefill 512, 1 run")
    parser.add_argument("--threads", type=int, default=0, help="one thread count (default: 1 and 2)")
    parser.add_argument("--new-tokens", type=int, default=0, help="default 128 (--quick 32)")
    parser.add_argument("--prefill-n", type=int, default=0, help="default 2048 (--quick 512)")
    parser.add_argument("--repeats", type=int, default=0,
                        help="timed runs per cell and engine, best kept; the decoding cells against "
                             "CTranslate2 alternate them in rounds whose ratios decide the target (met "
                             "only when all 5 or more are >= 1x; default 5; --quick 1)")
    parser.add_argument("--llama-python", default="", help="python of scripts/llamacpp_bench_venv.sh")
    parser.add_argument("--sdpa-python", default="", help="python of scripts/python_package_venv.sh")
    parser.add_argument("--no-prefill", action="store_true")
    parser.add_argument("--compute-types", default="float32,int8",
                        help="float32 and/or int8 decoding cells, comma-separated (default both); int8 = "
                             "attnkit --compute-type int8 against CTranslate2 compute_type int8 (no llama.cpp "
                             "column; the prefill is float32)")
    parser.add_argument("--compute-type", default="float32", help=argparse.SUPPRESS)  # a peer's
    parser.add_argument("--engine", choices=["ct2", "llamacpp", "sdpa"])
    parser.add_argument("--cells", default="[]")
    a, _ = parser.parse_known_args()
    a.dir = os.path.expanduser(a.dir)
    a.gguf = os.path.expanduser(a.gguf)
    a.repeats = a.repeats or (1 if a.quick else 5)
    if a.command == "f32gguf":
        return write_f32_gguf(a.gguf, os.path.join(a.dir, "f32.gguf"))
    if a.command == "peer":
        cells = json.loads(a.cells)
        return {"ct2": peer_ct2, "llamacpp": peer_llamacpp, "sdpa": peer_sdpa}[a.engine](a, cells)
    if a.command == "report":
        return render_from_json(JSON_PATH, DOC_PATH, BEGIN, END, markdown, "decode_smollm2")
    compute_types = [c for c in a.compute_types.split(",") if c]
    if not compute_types or any(c not in ("float32", "int8") for c in compute_types):
        sys.exit(f"decode_smollm2: --compute-types takes float32 and/or int8, not '{a.compute_types}'")
    if not os.path.exists(a.gguf):
        sys.exit(f"decode_smollm2: no {a.gguf} (scripts/setup.sh fetches it)")
    prepare(a)
    if a.command == "prepare":
        return
    new_tokens = a.new_tokens or (32 if a.quick else 128)
    prefill_n = a.prefill_n or (512 if a.quick else 2048)
    thread_counts = [a.threads] if a.threads else ([2] if a.quick else [1, 2])
    start_machine, start_load = machine_isa(), load_averages()
    prompt = prompt_ids(a, PROMPT)
    llama_note = ""
    if not a.llama_python:
        llama_note = ("no llama.cpp column: no llama-cpp-python venv (scripts/llamacpp_bench_venv.sh "
                      "failed or was not given)")
    elif not os.path.exists(os.path.join(a.dir, "f32.gguf")):
        llama_note = "llama.cpp on the Q4_1 file only: no f32.gguf (needs --sdpa-python's gguf package)"
    rows, checks, prefill_rows = [], [], []
    peers = {}
    float_ids = {}  # (threads, beams) -> attnkit's float32 ids
    for threads in thread_counts:
        cells = [{"beams": beams, "new_tokens": new_tokens, "prompt": prompt} for beams in (1, 4)]
        for compute_type in compute_types:
            # Alternating rounds (issue 44): CTranslate2's process over both cells, then attnkit's
            # process for each, round after round; the best round is the table's number, the
            # rounds' ratios give the verdict (bench_process.round_verdict).
            ct2_rounds, our_rounds = {}, {}
            for _ in range(a.repeats):
                for r in json_lines(run(
                        [sys.executable, os.path.abspath(__file__), "peer", "--engine", "ct2", "--threads",
                         str(threads), "--dir", a.dir, "--repeats", "1", "--compute-type", compute_type,
                         "--cells", json.dumps(cells)], thread_env(threads))):
                    ct2_rounds.setdefault(r["beams"], []).append(r)
                for cell in cells:
                    our_rounds.setdefault(cell["beams"], []).append(
                        attnkit(a, threads, prompt, new_tokens, cell["beams"], 1, compute_type))
            for cell in cells:
                beams = cell["beams"]
                doc = our_rounds[beams][-1][1]
                mine = {k: min(m[k] for m, _ in our_rounds[beams]) for k in our_rounds[beams][0][0]}
                ids = doc["results"][0]["sequences"][0]["ids"]
                if any(d["results"][0]["sequences"][0]["ids"] != ids for _, d in our_rounds[beams]):
                    sys.exit(f"decode_smollm2: attnkit's ids differ between rounds ({threads} thread(s), "
                             f"beams {beams}, {compute_type})")
                c = {**ct2_rounds[beams][-1], "seconds": min(r["seconds"] for r in ct2_rounds[beams]),
                     "cpu": min(r["cpu"] for r in ct2_rounds[beams])}
                peers["ct2"] = c["peer"]
                row = {"compute_type": compute_type, "threads": threads, "beams": beams,
                       "attnkit": mine["seconds"], "attnkit_cpu": mine["cpu"], "ct2": c["seconds"],
                       "ct2_cpu": c["cpu"], "attnkit_rounds": [m["seconds"] for m, _ in our_rounds[beams]],
                       "ct2_rounds": [r["seconds"] for r in ct2_rounds[beams]]}
                what = f"{threads} thread(s), {'greedy' if beams == 1 else 'beam 4'}"
                if compute_type == "float32":
                    float_ids[(threads, beams)] = ids
                    checks.append(f"{what}: attnkit vs CTranslate2: {agreement(ids, c['ids'])}")
                else:
                    line = f"{what}, int8: attnkit int8 vs CTranslate2 int8: {agreement(ids, c['ids'])}"
                    if (threads, beams) in float_ids:
                        line += f"; attnkit int8 vs attnkit float32: {agreement(ids, float_ids[(threads, beams)])}"
                    checks.append(line)
                rows.append(row)
                print(f"progress: {json.dumps(row)}; {checks[-1]}", file=sys.stderr, flush=True)
        llama = {}
        if a.llama_python:
            for r in json_lines(run([a.llama_python, os.path.abspath(__file__), "peer", "--engine", "llamacpp",
                                     "--threads", str(threads), "--dir", a.dir, "--gguf", a.gguf,
                                     "--repeats", str(a.repeats), "--cells", json.dumps(cells[:1])],
                                    thread_env(threads))):
                llama[r["weights"]] = r
                peers["llamacpp"] = r["peer"]
        for label, r in llama.items():  # beside attnkit's float32 greedy row of this thread count
            row = next((x for x in rows if x["threads"] == threads and x["beams"] == 1
                        and x.get("compute_type", "float32") == "float32"), None)
            if row is not None:
                row[f"llama_{label}"], row[f"llama_{label}_cpu"] = r["seconds"], r["cpu"]
                checks.append(f"{threads} thread(s), greedy: attnkit vs llama.cpp {label}: "
                              f"{agreement(float_ids[(threads, 1)], r['ids'])}")
        if a.no_prefill:
            continue
        long_prompt = prompt_ids(a, fortunes_text(prefill_n * 8))[:prefill_n]
        if len(long_prompt) < prefill_n:
            sys.exit(f"decode_smollm2: the fortunes text gave {len(long_prompt)} ids, not {prefill_n}")
        mine, doc = attnkit(a, threads, long_prompt, 1, 1, a.repeats)
        first = doc["results"][0]["sequences"][0]["ids"][0]
        row = {"threads": threads, "n": prefill_n, "attnkit": mine["prefill"], "attnkit_cpu": mine["prefill_cpu"],
               "attnkit_slowest": mine["prefill_slowest"], "first": {"attnkit": first}}
        pcell = [{"prompt": long_prompt, "new_tokens": 1, "prefill": True}]
        if a.sdpa_python:
            r = json_lines(run([a.sdpa_python, os.path.abspath(__file__), "peer", "--engine", "sdpa",
                                "--threads", str(threads), "--dir", a.dir, "--repeats", str(a.repeats),
                                "--cells", json.dumps(pcell)], thread_env(threads)))[0]
            row["sdpa"], row["sdpa_cpu"], row["first"]["sdpa"] = r["seconds"], r["cpu"], r["first"]
            peers["sdpa"] = r["peer"]
        if a.llama_python and os.path.exists(os.path.join(a.dir, "f32.gguf")):
            r = json_lines(run([a.llama_python, os.path.abspath(__file__), "peer", "--engine", "llamacpp",
                                "--threads", str(threads), "--dir", a.dir, "--gguf", a.gguf,
                                "--repeats", str(a.repeats), "--cells", json.dumps(pcell)],
                               thread_env(threads)))[0]
            row["llama_F32"], row["llama_F32_cpu"], row["first"]["llama_F32"] = r["seconds"], r["cpu"], r["first"]
        prefill_rows.append(row)
        print(f"progress: prefill {json.dumps(row)}", file=sys.stderr, flush=True)

    result = {"date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "machine": start_machine,
              "load_start": start_load, "load_end": load_averages(), "new_tokens": new_tokens, "prefill_n": prefill_n,
              "prompt_ids": len(prompt), "repeats": a.repeats, "quick": a.quick, "peers": peers,
              "llama_note": llama_note, "checks": checks, "rows": rows, "prefill_rows": prefill_rows}
    text = markdown(result)
    print(text)
    if not a.quick:  # a full run is the one docs/decoding.md reports
        write_json(JSON_PATH, result)
        replace_region(DOC_PATH, BEGIN, END, text)
        print("decode_smollm2.py: wrote docs/decode-smollm2.json and docs/decoding.md", file=sys.stderr)


def markdown(r):
    """The docs/decoding.md region of a run, rendered from its JSON alone (test_docs_tables checks
    it): machine, the ids checks, tokens/s and tokens/CPU-s tables, the prefill tables, targets."""
    new_tokens, prefill_n, rows, prefill_rows = r["new_tokens"], r["prefill_n"], r["rows"], r["prefill_rows"]
    out = [BEGIN, "",
           f"Run {r['date']} by `bench/decode_smollm2.py`. Machine: {r['machine']}; load average (1, 5, 15 min) "
           f"{r['load_start']} at the start, {r['load_end']} at the end. SmolLM2-135M-Instruct from its GGUF file "
           "(Q4_1 linear layers, Q8_0 embedding); attnkit and CTranslate2 run its weights dequantized, in float32"
           + ("; in the int8 rows both quantize those float32 weights per output row as they load (attnkit "
              "`--compute-type int8`, CTranslate2 `compute_type=\"int8\"`; activations per row at run time). "
              if any(x.get("compute_type") == "int8" for x in rows) else ". ") +
           f"Prompt: one chat turn, {r['prompt_ids']} ids (attnkit's tokenization, given to every side); "
           f"{new_tokens} new tokens, no end token; best of {r['repeats']} on every side"
           + (" (against CTranslate2 in alternating rounds: a target is met only when the ratio of every "
              "one of 5 or more rounds reaches it, missed when none does, else not settled)"
              if any("attnkit_rounds" in x for x in rows) else "") + ".", ""]
    out.append("Peers: " + "; ".join(f"{k}: {v}" for k, v in sorted(r["peers"].items())) + "."
               + (f" {r['llama_note'][0].upper()}{r['llama_note'][1:]}." if r["llama_note"] else ""))
    out += ["", "Ids (attnkit's against each peer's, same prompt ids):", ""]
    out += [f"- {line}" for line in r["checks"]]
    decode_cols = ["ct2"] + ([c for c in ("llama_F32", "llama_Q4_1") if any(c in x for x in rows)])
    names = {"ct2": "CTranslate2", "llama_F32": "llama.cpp F32", "llama_Q4_1": "llama.cpp Q4_1",
             "sdpa": "transformers sdpa"}

    def decode_table(unit, suffix):
        """One row per cell: tokens per `unit` of attnkit and each peer, and attnkit / peer."""
        lines = [f"| threads | compute | decoding | attnkit tokens/{unit} | "
                 + " | ".join(f"{names[c]} tokens/{unit} | attnkit / {names[c]}" for c in decode_cols) + " |",
                 "|---|---|---|---|" + "---|---|" * len(decode_cols)]
        for x in rows:
            k = new_tokens / x["attnkit" + suffix]
            line = (f"| {x['threads']} | {x.get('compute_type', 'float32')} | "
                    f"{'greedy' if x['beams'] == 1 else 'beam 4'} | {k:.1f} |")
            for c in decode_cols:
                if c + suffix in x:
                    y = new_tokens / x[c + suffix]
                    line += f" {y:.1f} | {k / y:.2f}x |"
                else:
                    line += " - | - |"
            lines.append(line)
        return lines

    out += [""] + decode_table("s", "") + [
        "", "tokens/s = new tokens / seconds; attnkit's seconds: its process's prefill_s + decode_s "
        "(--json timing; no load, no warm-up); the peers': their generate call, after a warm-up.", "",
        "CPU time (tokens per CPU-second, user + system of all the process's threads; the fair "
        "measure on a loaded machine, where wall time also counts waiting for a core; with 2 "
        "threads it also counts spin-waiting):", ""] + decode_table("CPU-s", "_cpu") + [
        "", "attnkit's: its --json prefill_cpu_s + decode_cpu_s; the peers': time.process_time() around the call."]
    if prefill_rows:
        cols = [c for c in ("sdpa", "llama_F32") if any(c in x for x in prefill_rows)]
        for unit, suffix in (("seconds", ""), ("CPU seconds", "_cpu")):
            out += ["", f"Prefill, {prefill_n} tokens (Debian's English fortunes), batch 1, next-token "
                    f"logits only; {unit} (best of {r['repeats']}):", "",
                    "| threads | attnkit | " + " | ".join(f"{names[c]} | attnkit / {names[c]}" for c in cols)
                    + " | first token (attnkit" + "".join(f", {names[c]}" for c in cols) + ") |",
                    "|---|---|" + "---|---|" * len(cols) + "---|"]
            for x in prefill_rows:
                line = f"| {x['threads']} | {x['attnkit' + suffix]:.3f} |"
                for c in cols:
                    line += (f" {x[c + suffix]:.3f} | {x[c + suffix] / x['attnkit' + suffix]:.2f}x |"
                             if c + suffix in x else " - | - |")
                line += " " + ", ".join(str(x["first"].get(c, "-")) for c in ["attnkit"] + cols) + " |"
                out.append(line)
        out += ["", "(attnkit / peer = the peer's seconds over attnkit's: above 1 is attnkit faster; "
                "attnkit's: --json prefill_s / prefill_cpu_s of generate --max-new-tokens 1.)"]
    if not r["quick"]:
        out.append("")
        for x in rows:
            out.append(ct2_target_line(x, f"{x.get('compute_type', 'float32')}, {x['threads']} thread(s), "
                                          f"{'greedy' if x['beams'] == 1 else 'beam 4'}"))
        for x in prefill_rows:
            if "sdpa" in x:
                ratio, cpu = x["sdpa"] / x["attnkit"], x["sdpa_cpu"] / x["attnkit_cpu"]
                if "attnkit_slowest" in x:
                    # Every run of either side against every run of the other is at least sdpa's
                    # fastest over attnkit's slowest: met when that reaches the target.
                    worst = x["sdpa"] / x["attnkit_slowest"]
                    verdict = "MET" if worst >= 1.2 else "MISSED" if ratio < 1.2 else "NOT SETTLED"
                    out.append(f"- target prefill >= 1.2x sdpa ({x['threads']} thread(s), n = {prefill_n}): "
                               f"best {ratio:.2f}x, attnkit's slowest of {r['repeats']} runs against sdpa's "
                               f"fastest {worst:.2f}x: {verdict} (CPU time: {cpu:.2f}x)")
                else:
                    out.append(f"- target prefill >= 1.2x sdpa ({x['threads']} thread(s), n = {prefill_n}): "
                               f"{ratio:.2f}x {'PASS' if ratio >= 1.2 else 'MISS'} (CPU time: {cpu:.2f}x)")
    out += ["", END, ""]
    return "\n".join(out)


if __name__ == "__main__":
    main()
