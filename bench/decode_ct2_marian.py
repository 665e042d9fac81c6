#!/usr/bin/env python3
"""make bench, Marian part: translation with an Opus-MT-shaped model (MarianMTModel, 6+6 layers,
d_model 512, 8 heads, FFN 2048, vocabulary 58101 as opus-mt-en-de, random weights) by
`attnkit generate` (the CLI), CTranslate2 (its own transformers converter, float32) and transformers
`generate`, greedy and beam 4, batch 1 and 16, 1 and 2 threads. Run with the python of
scripts/decode_bench_venv.sh (ctranslate2, transformers 4.38.2, sentencepiece over Debian's
python3-torch 1.13), as bench/run.sh does.

Before any timing is printed, the three must give the same token ids for every cell (greedy and
beam, both batch sizes, every thread count, plus an untimed greedy cell with
no_repeat_ngram_size 1 so that the outputs vary), the same scores within 1e-3 relative (greedy:
summed log-probability; beam: / length), attnkit's source ids must equal MarianTokenizer's, and
every output must have exactly the fixed length (--new-tokens, default 32); otherwise the script
exits 1 and prints what differs (the peer check: attnkit's Marian decoding against two held-out
implementations on an Opus-MT-sized model). --quick: 2 threads, batch 1 and 4, 16 tokens.

The model (made once, kept in --marian-dir, default ~/.cache/attnkit/decode-bench-marian):
  - the Bible pairs of `attnkit data parallel` (World English Bible -> Reina-Valera 1909, split by
    book); the sources are the first verses of the test books (Esther);
  - source.spm: SentencePiece Unigram trained on the English train side plus the English fortunes
    of Debian's `fortunes` (32000 pieces); target.spm: on the Spanish train side (32000 asked,
    as many as the text gives); vocab.json: </s> 0, <unk> 1, then both models' pieces, then
    "<unused-K>" entries up to opus-mt-en-de's 58101 ids (the last is <pad>), so that the
    embedding and the LM head have Opus-MT's shape;
  - MarianMTModel(MarianConfig(... opus-mt-en-de's shape ..., init_std 0.1)) with
    torch.manual_seed(0) (init_std 0.02, transformers' default, repeats one token whatever the
    source; 0.1 gives each source its own output, so the check compares something), saved
    by transformers (safetensors), and CTranslate2's TransformersConverter (float32) of it.
    forced_eos_token_id is left out of config.json (opus-mt-en-de has 0): the benchmark forces
    every translation to exactly --new-tokens tokens (min = max length; the random model would
    otherwise stop or repeat at random places), and a forced EOS at the last step would clash
    with the minimum length.

Timing. transformers and CTranslate2 run in one process per engine and thread count: the model
is loaded, one short warm-up translation is run, then each cell's translation (encoder + all
decoder steps) is timed in-process. attnkit is its CLI (`attnkit --threads T generate --model DIR
--sources FILE --json ...`, one process per cell), timed in its process too: the prefill_s +
decode_s of its --json "timing" (from the decoding entry, which runs the encoder over the
sources, to the last token; not the load or the tokenizer), so it too is encoder + all decoder
steps, without a warm-up. Every timed cell is run --repeats times (default 3; --quick 1) on every
side -- the peers' call in their process, attnkit's process -- and the fastest kept.
tokens/s = sentences x new tokens / seconds.
Every process gets OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = T; CTranslate2 gets intra_threads = T,
inter_threads = 1; transformers torch.set_num_threads(T). CPU time is reported beside wall time
(tokens per CPU-second): the peers' time.process_time() around the timed call, attnkit's
prefill_cpu_s + decode_cpu_s (the process's CPU clock over the same span). The process's whole
wall time (start, load, tokenizer, printing) is printed beside, for what a user waits.

Compute types (--compute-types, default float32,int8): float32 is the peer-checked comparison
above; int8 runs attnkit `--compute-type int8` against CTranslate2 `compute_type="int8"` on the same
float32 files (each quantizes the weights per output row as it loads and the activations per row
at run time; transformers has no int8 column). Two int8 realisations need not agree on every id:
their agreement with each other and with attnkit's float32 ids is reported, not required.
A full run (both thread counts, both compute types, not --quick) writes docs/decode-marian.json and
its region of docs/decoding.md (tests/python/test_docs_tables.py checks that they agree);
`bench/decode_ct2_marian.py report` re-renders the region from the JSON."""
import argparse
import datetime
import json
import os
import sys
import time
import warnings

from bench_process import ct2_target_line, load_averages, machine_isa, run_or_exit, thread_env
from gnu_time import render_from_json, replace_region, write_json

# MarianTokenizer's advice (sacremoses is for its unused `moses` normalisation).
warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JSON_PATH = os.path.join(ROOT, "docs", "decode-marian.json")
DOC_PATH = os.path.join(ROOT, "docs", "decoding.md")
BEGIN, END = "<!-- decode-marian:begin -->", "<!-- decode-marian:end -->"
VOCAB = 58101  # opus-mt-en-de
# --isa avx2: every engine held to AVX2 on an AVX-512 machine (issue 43 part 3, AVX2 against AVX2
# on the same CPU): attnkit's kernel copies (ATTNKIT_KERNEL_ISA), CTranslate2's own kernels
# (CT2_FORCE_CPU_ISA) and the oneDNN it runs int8 GEMMs in (ONEDNN_MAX_CPU_ISA; VNNI off too),
# ATen's own kernels (ATEN_CPU_CAPABILITY; attnkit's LibTorch and transformers' torch) and
# OpenBLAS (OPENBLAS_CORETYPE Haswell: its AVX2 kernels).
ISA_ENV = {"auto": {}, "avx2": {"ATTNKIT_KERNEL_ISA": "avx2", "CT2_FORCE_CPU_ISA": "AVX2",
                                "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
                                "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell"}}
PAD = VOCAB - 1
SHAPE = {"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
         "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048}
SPM_SIZE = 32000
SEED = 0
# transformers' default init_std (0.02) gives the same repeated token for every source; 0.1 makes
# the output depend on the source, so that the peer check compares something.
INIT_STD = 0.1


# --- the model -------------------------------------------------------------------------------

def english_fortunes(path):
    """The English fortune files of Debian's `fortunes` (no Chinese ones, no ASCII art), one text
    line per line, control characters (overstrike backspaces) removed."""
    root = "/usr/share/games/fortunes"
    lines = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if "." in name or not os.path.isfile(full) or name in ("chinese", "tang300", "song100", "ascii-art"):
            continue
        with open(full, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = "".join(c for c in line.rstrip("\n") if c >= " ")
                if line.strip() and line != "%":
                    lines.append(line)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines)


def prepare(a):
    """Builds (once) DIR/hf (Marian directory), DIR/ct2 (converted) and DIR/sources.txt."""
    done = os.path.join(a.model_dir, "done.json")
    want = {"vocab": VOCAB, **SHAPE, "seed": SEED, "init_std": INIT_STD, "spm": SPM_SIZE, "format": 1}
    if os.path.exists(done):
        with open(done) as f:
            if json.load(f) == want:
                return
    import ctranslate2
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    t0 = time.perf_counter()
    work = os.path.join(a.model_dir, "work")
    os.makedirs(work, exist_ok=True)
    pairs = os.path.join(work, "bible")
    run([os.path.join(a.build, "attnkit"), "--threads", "1", "--quiet", "data", "parallel",
         "--out", pairs])
    with open(os.path.join(pairs, "train.tsv"), encoding="utf-8") as f:
        train = [line.rstrip("\n").split("\t") for line in f]
    with open(os.path.join(pairs, "test.tsv"), encoding="utf-8") as f:
        test = [line.rstrip("\n").split("\t")[0] for line in f]
    for side, name in ((0, "en.txt"), (1, "es.txt")):
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            f.write("\n".join(p[side] for p in train) + "\n")
    english_fortunes(os.path.join(work, "fortunes.txt"))
    models = []
    for prefix, inputs in (("source", "en.txt,fortunes.txt"), ("target", "es.txt")):
        spm.SentencePieceTrainer.train(
            input=",".join(os.path.join(work, i) for i in inputs.split(",")),
            model_prefix=os.path.join(work, prefix), vocab_size=SPM_SIZE, model_type="unigram",
            hard_vocab_limit=False, character_coverage=1.0, num_threads=1, minloglevel=2)
        models.append(os.path.join(work, prefix + ".model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for model in models:
        sp = spm.SentencePieceProcessor(model_file=model)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece not in vocab and piece not in ("<s>", "<unk>", "</s>"):
                vocab[piece] = len(vocab)
    pieces = len(vocab)
    if pieces > PAD:
        sys.exit(f"decode_ct2_marian: {pieces} pieces do not fit in {VOCAB} ids")
    while len(vocab) < PAD:
        vocab[f"<unused-{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = PAD
    vocab_path = os.path.join(work, "vocab.json")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    hf = os.path.join(a.model_dir, "hf")
    MarianTokenizer(models[0], models[1], vocab_path).save_pretrained(hf)
    config = MarianConfig(vocab_size=VOCAB, max_position_embeddings=512, pad_token_id=PAD,
                          decoder_start_token_id=PAD, eos_token_id=0, forced_eos_token_id=None,
                          bad_words_ids=[[PAD]], scale_embedding=True, activation_function="swish",
                          init_std=INIT_STD,
                          **SHAPE)
    torch.manual_seed(SEED)
    MarianMTModel(config).eval().save_pretrained(hf, safe_serialization=True)
    ctranslate2.converters.TransformersConverter(hf).convert(
        os.path.join(a.model_dir, "ct2"), quantization="float32", force=True)
    with open(os.path.join(a.model_dir, "sources.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(test[:16]) + "\n")
    with open(os.path.join(a.model_dir, "pieces.json"), "w") as f:
        json.dump({"source_spm": spm.SentencePieceProcessor(model_file=models[0]).get_piece_size(),
                   "target_spm": spm.SentencePieceProcessor(model_file=models[1]).get_piece_size(),
                   "vocab_pieces": pieces, "vocab": VOCAB}, f)
    with open(done + ".tmp", "w") as f:
        json.dump(want, f)
    os.replace(done + ".tmp", done)
    print(f"prepared {a.model_dir} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


# --- the peers (one process per engine and thread count) ---------------------------------------

def peer(a):
    """Prints one JSON line per cell: ids of every sentence and the translation's seconds."""
    cells = json.loads(a.cells)
    with open(os.path.join(a.model_dir, "sources.txt"), encoding="utf-8") as f:
        sources = [line.rstrip("\n") for line in f]
    from transformers import MarianTokenizer
    tokenizer = MarianTokenizer.from_pretrained(os.path.join(a.model_dir, "hf"))
    vocab = tokenizer.get_vocab()
    if a.engine == "ct2":
        import ctranslate2
        # int8: the float32 conversion quantized as it loads (per-row int8 weights, the same numbers
        # as a `--quantization int8` conversion), as attnkit's --compute-type int8 quantizes.
        translator = ctranslate2.Translator(os.path.join(a.model_dir, "ct2"), device="cpu",
                                            compute_type=a.compute_type, inter_threads=1,
                                            intra_threads=a.threads)
        name = f"CTranslate2 {ctranslate2.__version__}"

        def translate(batch, beams, n, no_repeat):
            tokens = [tokenizer.convert_ids_to_tokens(tokenizer(s).input_ids) for s in batch]
            out = translator.translate_batch(tokens, beam_size=beams, max_decoding_length=n,
                                             min_decoding_length=n, length_penalty=1.0,
                                             no_repeat_ngram_size=no_repeat, num_hypotheses=1,
                                             max_batch_size=0, return_scores=True)
            # The score is the summed log-probability / length (length_penalty 1, greedy too).
            return ([[vocab[t] for t in r.hypotheses[0]] for r in out],
                    [r.scores[0] * (len(r.hypotheses[0]) if beams == 1 else 1) for r in out])
    else:
        if a.compute_type != "float32":
            sys.exit(f"decode_ct2_marian: transformers runs float32 only, not {a.compute_type}")
        import torch
        import transformers
        from transformers import MarianMTModel
        torch.set_num_threads(a.threads)
        model = MarianMTModel.from_pretrained(os.path.join(a.model_dir, "hf")).eval()
        name = f"transformers {transformers.__version__} (torch {torch.__version__})"

        def translate(batch, beams, n, no_repeat):
            inputs = tokenizer(batch, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**inputs, num_beams=beams, do_sample=False, max_new_tokens=n,
                                     min_new_tokens=n, length_penalty=1.0, early_stopping=False,
                                     no_repeat_ngram_size=no_repeat, output_scores=True,
                                     return_dict_in_generate=True)
            ids = out.sequences[:, 1:]  # without the decoder start token
            if beams > 1:  # summed log-probability / length
                return ids.tolist(), out.sequences_scores.tolist()
            # greedy: the summed log-probabilities of the processed scores (as attnkit's score)
            logp = torch.stack(out.scores, 1).log_softmax(-1)
            return ids.tolist(), logp.gather(2, ids.unsqueeze(2)).sum((1, 2)).tolist()

    translate(sources[:1], 1, 2, 0)  # warm-up
    for cell in cells:
        batch = sources[:cell["batch"]]
        seconds = cpu = None
        for _ in range(a.repeats):  # best of --repeats (the same outputs every time)
            t0, c0 = time.perf_counter(), time.process_time()
            ids, scores = translate(batch, cell["beams"], cell["new_tokens"], cell["no_repeat"])
            wall, used = time.perf_counter() - t0, time.process_time() - c0
            seconds = wall if seconds is None else min(seconds, wall)
            cpu = used if cpu is None else min(cpu, used)
        print(json.dumps({**cell, "engine": a.engine, "peer": name, "seconds": seconds, "cpu": cpu,
                          "ids": ids, "scores": scores}), flush=True)


# --- the driver --------------------------------------------------------------------------------

def run(argv, env=None):
    return run_or_exit(argv, "decode_ct2_marian", env)


def attnkit_cell(a, threads, cell, sources_file):
    """One `attnkit generate` as a user runs it (the driver calls it once per round): its
    in-process seconds and CPU seconds (--json timing: prefill + decode), the process's wall time
    and the JSON it prints."""
    argv = [os.path.join(a.build, "attnkit"), "--threads", str(threads), "--quiet", "generate",
            "--model", os.path.join(a.model_dir, "hf"), "--sources", sources_file, "--json",
            "--strategy", "greedy" if cell["beams"] == 1 else "beam", "--beams", str(cell["beams"]),
            "--max-new-tokens", str(cell["new_tokens"]), "--min-new-tokens", str(cell["new_tokens"]),
            "--no-repeat-ngram-size", str(cell.get("no_repeat", 0)),
            "--compute-type", cell.get("compute_type", "float32")]
    env = thread_env(threads, ISA_ENV[a.isa])
    if a.few_rows_max >= 0:
        env["ATTNKIT_DECODE_FEW_ROWS_MAX"] = str(a.few_rows_max)
    t0 = time.perf_counter()
    doc = json.loads(run(argv, env))
    wall = time.perf_counter() - t0
    timing = doc["timing"]
    return (timing["prefill_s"] + timing["decode_s"], timing["prefill_cpu_s"] + timing["decode_cpu_s"], wall,
            doc)




def agreement(mine, theirs):
    """How many of the sentences' ids are equal, and how many positions in all."""
    same = sum(x == y for x, y in zip(mine, theirs))
    positions = sum(len(x) for x in mine)
    equal = sum(a == b for x, y in zip(mine, theirs) for a, b in zip(x, y))
    return f"{same} of {len(mine)} sentences equal ({equal} of {positions} positions)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "prepare", "peer", "report"])
    parser.add_argument("--build", default="build")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="one thread count (default: 1 and 2)")
    parser.add_argument("--marian-dir", dest="model_dir", default="~/.cache/attnkit/decode-bench-marian",
                        help="where the Marian model (HF + CTranslate2 layouts) is kept")
    parser.add_argument("--new-tokens", type=int, default=0,
                        help="fixed output length (default 32; --quick 16)")
    parser.add_argument("--compute-types", default="float32,int8",
                        help="float32 and/or int8, comma-separated (default both); int8 = attnkit "
                             "--compute-type int8 against CTranslate2 compute_type int8")
    parser.add_argument("--compute-type", default="float32", help=argparse.SUPPRESS)  # a peer's
    parser.add_argument("--isa", choices=sorted(ISA_ENV), default="auto",
                        help="avx2: attnkit, CTranslate2 and oneDNN held to AVX2 (an AVX-512 machine "
                             "measuring its AVX2 paths); the docs' JSON is written by auto runs only")
    parser.add_argument("--engine", choices=["ct2", "hf"])
    parser.add_argument("--cells", default="[]")
    parser.add_argument("--repeats", type=int, default=0,
                        help="alternating rounds (every engine once per cell in each); the best is "
                             "kept and the rounds' ratios decide a target (met only when all 5 or "
                             "more are >= 1x; default 5; --quick: 1)")
    parser.add_argument("--few-rows-max", type=int, default=-1,
                        help="ATTNKIT_DECODE_FEW_ROWS_MAX for attnkit's processes (1: one-row steps "
                             "only on attnkit's kernels, the rest on at::linear; default: unset)")
    a, _ = parser.parse_known_args()
    a.model_dir = os.path.expanduser(a.model_dir)
    if a.command == "peer":
        return peer(a)
    if a.command == "report":
        return render_from_json(JSON_PATH, DOC_PATH, BEGIN, END, markdown, "decode_ct2_marian")
    compute_types = [c for c in a.compute_types.split(",") if c]
    if not compute_types or any(c not in ("float32", "int8") for c in compute_types):
        sys.exit(f"decode_ct2_marian: --compute-types takes float32 and/or int8, not '{a.compute_types}'")
    prepare(a)
    if a.command == "prepare":
        return

    new_tokens = a.new_tokens or (16 if a.quick else 32)
    a.repeats = a.repeats or (1 if a.quick else 5)
    batches = (1, 4) if a.quick else (1, 16)
    thread_counts = [a.threads] if a.threads else ([2] if a.quick else [1, 2])
    timed = [{"beams": beams, "batch": batch, "new_tokens": new_tokens, "no_repeat": 0}
             for beams in (1, 4) for batch in batches]
    # Checked, not timed (first thread count only): greedy with no_repeat_ngram_size 1, so that
    # every step must pick a new token (the random model otherwise repeats one).
    varied = {"beams": 1, "batch": max(batches), "new_tokens": new_tokens, "no_repeat": 1}
    with open(os.path.join(a.model_dir, "sources.txt"), encoding="utf-8") as f:
        sources = [line.rstrip("\n") for line in f]
    files = {}
    for batch in batches:
        files[batch] = os.path.join(a.model_dir, f"sources-{batch}.txt")
        with open(files[batch], "w", encoding="utf-8") as f:
            f.write("\n".join(sources[:batch]) + "\n")
    with open(os.path.join(a.model_dir, "pieces.json")) as f:
        pieces = json.load(f)
    start_machine, start_load = machine_isa(), load_averages()
    print(f"load average (1, 5, 15 min) at the start: {start_load}", file=sys.stderr)
    model = (f"MarianMTModel, 6+6 layers, d_model 512, 8 heads, FFN 2048, vocabulary {VOCAB} "
             f"({pieces['vocab_pieces']} SentencePiece pieces: source.spm {pieces['source_spm']}, "
             f"target.spm {pieces['target_spm']}; the rest unused ids), random weights (seed {SEED}, "
             f"init_std {INIT_STD})")

    from transformers import MarianTokenizer
    tokenizer = MarianTokenizer.from_pretrained(os.path.join(a.model_dir, "hf"))
    failures, rows, names, int8_checks = [], [], {}, []
    worst_score = {"ct2": 0.0, "hf": 0.0}
    distinct = {0: set(), 1: set()}
    checked = 0
    float_ids = {}  # (threads, beams, batch, no_repeat) -> attnkit's float32 ids

    def what_of(threads, cell):
        return (f"threads {threads}, {'greedy' if cell['beams'] == 1 else 'beam ' + str(cell['beams'])}"
                f"{', no_repeat_ngram_size ' + str(cell['no_repeat']) if cell['no_repeat'] else ''}, "
                f"batch {cell['batch']}")

    def check(threads, cell, doc, theirs):
        """float32: appends to failures what differs between attnkit's output and the peers'."""
        nonlocal checked
        what = what_of(threads, cell)
        got = [r["sequences"][0]["ids"] for r in doc["results"]]
        got_scores = [r["sequences"][0]["score"] for r in doc["results"]]
        if [r["prompt_ids"] for r in doc["results"]] != [tokenizer(s).input_ids
                                                          for s in sources[:cell["batch"]]]:
            failures.append(f"{what}: attnkit's source ids differ from MarianTokenizer's")
        for engine, r in theirs.items():
            if len(r["ids"]) != len(got):
                failures.append(f"{what}: {len(got)} sentences from attnkit, {len(r['ids'])} from {engine}")
            for i, (x, y) in enumerate(zip(got, r["ids"])):
                if x != y:
                    failures.append(f"{what}, sentence {i}: attnkit {x} vs {engine} {y}")
            for i, (x, y) in enumerate(zip(got_scores, r["scores"])):
                diff = abs(x - y) / max(1.0, abs(x))
                worst_score[engine] = max(worst_score[engine], diff)
                if diff > 1e-3:
                    failures.append(f"{what}, sentence {i}: score {x:.6f} (attnkit) vs {y:.6f} ({engine})")
        lengths = {len(x) for x in got} | {len(y) for r in theirs.values() for y in r["ids"]}
        if lengths != {cell["new_tokens"]}:
            failures.append(f"{what}: output lengths {sorted(lengths)}, not {cell['new_tokens']}")
        distinct[cell["no_repeat"]].update(t for x in got for t in x)
        checked += 1

    def check_int8(threads, cell, doc, ct2):
        """int8: two quantized engines need not give float32's ids; their agreement is reported
        (with CTranslate2 int8's and with attnkit's float32 ids); only the fixed length is required."""
        what = what_of(threads, cell)
        got = [r["sequences"][0]["ids"] for r in doc["results"]]
        lengths = {len(x) for x in got} | {len(y) for y in ct2["ids"]}
        if lengths != {cell["new_tokens"]}:
            failures.append(f"{what}, int8: output lengths {sorted(lengths)}, not {cell['new_tokens']}")
        line = f"{what}: attnkit int8 vs CTranslate2 int8: {agreement(got, ct2['ids'])}"
        key = (threads, cell["beams"], cell["batch"], cell["no_repeat"])
        if key in float_ids:
            line += f"; attnkit int8 vs attnkit float32: {agreement(got, float_ids[key])}"
        int8_checks.append(line)

    for compute_type in compute_types:
        engines = ("ct2", "hf") if compute_type == "float32" else ("ct2",)
        for n, threads in enumerate(thread_counts):
            cells = timed + ([varied] if n == 0 else [])
            # Alternating rounds (issue 44): each round runs every peer's process over the cells
            # (one timed call each, after its warm-up), then attnkit's process for each cell; the
            # best round is the table's number, the rounds' ratios give the verdict.
            peer_rounds, our_rounds = {}, {}
            for _ in range(a.repeats):
                for engine in engines:
                    out = run([sys.executable, os.path.abspath(__file__), "peer", "--engine", engine,
                               "--threads", str(threads), "--marian-dir", a.model_dir, "--compute-type",
                               compute_type, "--repeats", "1", "--cells", json.dumps(cells)],
                              thread_env(threads, ISA_ENV[a.isa]))
                    for line in out.splitlines():
                        if line.startswith("{"):
                            r = json.loads(line)
                            peer_rounds.setdefault((engine, r["beams"], r["batch"], r["no_repeat"]), []).append(r)
                            names[engine] = r["peer"]
                for cell in cells:
                    key = (cell["beams"], cell["batch"], cell["no_repeat"])
                    our_rounds.setdefault(key, []).append(
                        attnkit_cell(a, threads, {**cell, "compute_type": compute_type}, files[cell["batch"]]))
            for cell in cells:
                key = (cell["beams"], cell["batch"], cell["no_repeat"])
                mine = our_rounds[key]
                seconds, cpu, wall = (min(x[i] for x in mine) for i in range(3))
                doc = mine[-1][3]
                results = {e: {**peer_rounds[(e, *key)][-1],
                               "seconds": min(r["seconds"] for r in peer_rounds[(e, *key)]),
                               "cpu": min(r["cpu"] for r in peer_rounds[(e, *key)])} for e in engines}
                for e in engines:  # the same outputs in every round
                    if any(r["ids"] != results[e]["ids"] for r in peer_rounds[(e, *key)]):
                        failures.append(f"{what_of(threads, cell)}: {e}'s ids differ between rounds")
                ids_of = lambda d: [r["sequences"][0]["ids"] for r in d["results"]]  # noqa: E731
                if any(ids_of(x[3]) != ids_of(doc) for x in mine):
                    failures.append(f"{what_of(threads, cell)}: attnkit's outputs differ between rounds")
                if compute_type == "float32":
                    check(threads, cell, doc, results)
                    float_ids[(threads, *key)] = [r["sequences"][0]["ids"] for r in doc["results"]]
                else:
                    check_int8(threads, cell, doc, results["ct2"])
                if cell is not varied:
                    row = {"compute_type": compute_type, "threads": threads, "beams": cell["beams"],
                           "batch": cell["batch"], "attnkit": seconds, "attnkit_wall": wall,
                           "attnkit_cpu": cpu, "attnkit_rounds": [x[0] for x in mine]}
                    for e in engines:
                        row[e], row[e + "_cpu"] = results[e]["seconds"], results[e]["cpu"]
                        row[e + "_rounds"] = [r["seconds"] for r in peer_rounds[(e, *key)]]
                    rows.append(row)
                    print(f"progress: {json.dumps(row)}", file=sys.stderr, flush=True)
    if failures:
        print("PEER CHECK FAILED: attnkit's Marian translations differ from CTranslate2's / "
              "transformers' (timings not reported):")
        for f in failures[:20]:
            print("  " + f)
        sys.exit(1)
    checks = []
    if "float32" in compute_types:
        checks.append(
            f"float32, {checked} cells (greedy and beam 4, batch {' and '.join(map(str, batches))}, "
            f"{' and '.join(map(str, thread_counts))} thread(s), and greedy with no_repeat_ngram_size 1, "
            f"batch {max(batches)}): attnkit's ids = {names['ct2']}'s = {names['hf']}'s, source ids = "
            f"MarianTokenizer's, every output {new_tokens} tokens: OK. Scores (greedy: summed "
            f"log-probability; beam: / length) within {worst_score['ct2']:.1e} (CTranslate2) and "
            f"{worst_score['hf']:.1e} (transformers), relative. Distinct target ids in attnkit's "
            f"outputs: {len(distinct[0])} in the timed cells (the random model repeats a token), "
            f"{len(distinct[1])} with no_repeat_ngram_size 1.")
    checks += [f"int8, {line}" for line in int8_checks]
    result = {"date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "machine": start_machine,
              "load_start": start_load, "load_end": load_averages(), "model": model, "new_tokens": new_tokens,
              "batches": list(batches), "repeats": a.repeats, "quick": a.quick, "peers": names,
              "few_rows_max": a.few_rows_max, "isa": a.isa, "checks": checks, "rows": rows}
    text = markdown(result)
    print(text)
    if not a.quick and not a.threads and a.few_rows_max < 0 and compute_types == ["float32", "int8"] and a.isa == "auto":
        write_json(JSON_PATH, result)  # the full run is the one docs/decoding.md reports
        replace_region(DOC_PATH, BEGIN, END, text)
        print("decode_ct2_marian.py: wrote docs/decode-marian.json and docs/decoding.md", file=sys.stderr)


def markdown(r):
    """The docs/decoding.md region of a run, rendered from its JSON alone (test_docs_tables checks
    it): machine, the checks, tokens/s and tokens/CPU-s tables per compute type, the targets."""
    new_tokens, rows = r["new_tokens"], r["rows"]
    out = [BEGIN, "",
           f"Run {r['date']} by `bench/decode_ct2_marian.py`"
           + (f" --isa {r['isa']} (every engine held to AVX2)" if r.get("isa", "auto") != "auto" else "")
           + f". Machine: {r['machine']}; load average "
           f"(1, 5, 15 min) {r['load_start']} at the start, {r['load_end']} at the end. Model: {r['model']}. "
           f"Sources: the first {max(r['batches'])} verses of Esther (WEB); every translation forced to "
           f"exactly {new_tokens} tokens; best of {r['repeats']} on every side"
           + (" (alternating rounds: each round runs every engine once per cell; a target is met only "
              "when the ratio of every one of 5 or more rounds reaches it, missed when none does, "
              "else not settled)" if any("attnkit_rounds" in x for x in r["rows"]) else "") + ". "
           "Peers: " + "; ".join(f"{k}: {v}" for k, v in sorted(r["peers"].items())) + ".", "",
           "Checks:", ""]
    out += [f"- {line}" for line in r["checks"]]
    names = {"ct2": "CTranslate2", "hf": "transformers"}

    def table(compute_type, unit, suffix):
        sel = [x for x in rows if x["compute_type"] == compute_type]
        cols = [c for c in ("ct2", "hf") if any(c in x for x in sel)]
        lines = [f"| threads | decoding | batch | attnkit tokens/{unit} | "
                 + " | ".join(f"{names[c]} tokens/{unit} | attnkit / {names[c]}" for c in cols) + " |",
                 "|---|---|---|---|" + "---|---|" * len(cols)]
        for x in sel:
            tokens = x["batch"] * new_tokens
            k = tokens / x["attnkit" + suffix]
            line = f"| {x['threads']} | {'greedy' if x['beams'] == 1 else 'beam ' + str(x['beams'])} | {x['batch']} | {k:.1f} |"
            for c in cols:
                y = tokens / x[c + suffix]
                line += f" {y:.1f} | {k / y:.2f}x |"
            lines.append(line)
        return lines

    for compute_type in ("float32", "int8"):
        if not any(x["compute_type"] == compute_type for x in rows):
            continue
        label = ("float32 on every side" if compute_type == "float32" else
                 "int8: attnkit `--compute-type int8`, CTranslate2 `compute_type=\"int8\"` (both quantize the "
                 "float32 weights per row as they load; activations per row at run time)")
        out += ["", f"**{label}**, wall tokens/s:", ""] + table(compute_type, "s", "")
        out += ["", "Tokens per CPU-second of the same run:", ""] + table(compute_type, "CPU-s", "_cpu")
    out += ["", "tokens/s = sentences × new tokens / seconds. attnkit's seconds: its generate process's "
            "own prefill_s + decode_s (`--json` timing: the encoder over the sources and every decoder "
            "step; not the load or the tokenizer), its CPU seconds prefill_cpu_s + decode_cpu_s; the "
            "peers': their timed call (after a warm-up in their process), time.process_time() around it. "
            "attnkit's whole process (start, load, tokenizer, printing), wall seconds per row: "
            + ", ".join(f"{x['attnkit_wall']:.2f}" for x in rows) + "."]
    if not r["quick"]:
        out.append("")
        for x in rows:
            out.append(ct2_target_line(x, f"{x['compute_type']}, {x['threads']} thread(s), "
                                          f"{'greedy' if x['beams'] == 1 else 'beam 4'}, batch {x['batch']}"))
    out += ["", END, ""]
    return "\n".join(out)


if __name__ == "__main__":
    main()
