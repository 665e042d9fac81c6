"""Hugging Face tokenizers (the official Python binding) as the reference for the tokenizers of
today's decoder families. Run with the test venv's python (scripts/peer_python.sh):
    hf_decoder_families_reference.py CORPUS.json OUT_DIR
No released vocabulary is used (no network): for each family this trains a small BPE model on one
half of some fortunes files with the family's published normalizer / pre-tokenizer / decoder /
post-processor configuration and its special tokens -- a stand-in in the family's format -- saves
it as OUT_DIR/NAME/tokenizer.json, and encodes HELD-OUT text: the other half of the files, the
varied texts of CORPUS.json and a hand-made hard set. Prints JSON:
    {"configs": [{"name", "dir", "cases": [{"text", "ids", "ids_plain", "offsets", "decoded", "decoded_all"}],
                  "decodes": [{"ids", "decoded", "decoded_all"}]}]}
ids_plain: without special tokens; decoded: decode(ids) (specials skipped); decoded_all: with them."""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

FORTUNES = "/usr/share/games/fortunes"
FILES = ["computers", "people", "literature", "chinese"]

# The pre-tokenizer regexes of the published tokenizer.json files.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")

HARD = [
    "", " ", "  ", "\n", "\t", "a", "Hello world", "  leading spaces", "trailing spaces   ", "inner     spaces  here",
    "tabs\tand\t\tnewlines\nand\r\nwindows\r\n\r\nline ends\n\n\n", " \n \n\t x", "x \n", "word\n  indented\n\tmore",
    "DON'T WON'T I'M YOU'RE SHE'LL THEY'VE HE'D IT'S", "don't won't i'm you're she'll they've he'd it's O'Neil's",
    "Mixed 'S 'T 'RE 'VE 'M 'LL 'D and ''quotes'' `tick` \"double\"",
    "1 12 123 1234 12345 123456 1234567 3.14159 2024-11-27 1,000,000 007 0x1F",
    "\u0661\u0662\u0663 Arabic-Indic, \u0967\u0968\u0969 Devanagari, \u00bd \u00b2 \u2460 numbers",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
    "\u3053\u3093\u306b\u3061\u306f \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "emoji \U0001F600\U0001F999 family \U0001F468\u200d\U0001F469\u200d\U0001F467 flag \U0001F1EB\U0001F1F7 skin \U0001F44D\U0001F3FD",
    "Cafe\u0301 n\u0303 a\u0323\u0302 combining, caf\u00e9 precomposed, Z\u0351\u0315a\u0361\u0332lgo",
    "rare \U0001D518\U0001D52B\U0001D526\U0001D520\U0001D52C\U0001D521\U0001D522 \ua66e \u2603 \U00010348 \U0001F999",
    "odd spaces:\u00a0nbsp\u3000ideographic\u2009thin\u200bzero-width\ufeffbom",
    "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }  // done",
    "    def f(x):\n        return x ** 2\n",
    "URL https://example.com/a?b=c&d=e#f and e-mail someone@example.org",
    "\u2581already\u2581has\u2581metaspace \u2581 and <0x41> written out",
]


def halves():
    train, held = [], []
    for name in FILES:
        with open(os.path.join(FORTUNES, name), encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip("\n") for line in f if line.strip() and line.strip() != "%"]
        half = len(lines) // 2
        if name == "chinese":  # a large file: a slice of each half is enough
            train += lines[:1500]
            held += lines[half:half + 60]
        else:
            train += lines[:half]
            held += lines[half::max(1, (len(lines) - half) // 60)][:60]
    return train, held


def byte_level_family(name, train, pre_tokenizer, normalizer, post_processor, decoder, specials, extra_added=()):
    t = Tokenizer(models.BPE())
    if normalizer is not None:
        t.normalizer = normalizer
    t.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator(train, trainer=trainer)
    t.decoder = decoder
    if extra_added:
        t.add_tokens(list(extra_added))
    t.post_processor = post_processor(t)
    return t


def sentencepiece_family(train, normalizer, pre_tokenizer, decoder, specials, template):
    """BPE with byte fallback as the Llama 2 / Mistral / Gemma files have it: the specials first,
    then the 256 <0xNN> byte tokens (ordinary vocabulary, not added tokens), then the trained
    pieces; a small alphabet, so held-out characters fall back to bytes."""
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    if normalizer is not None:
        t.normalizer = normalizer
    if pre_tokenizer is not None:
        t.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=specials, show_progress=False, limit_alphabet=150)
    t.train_from_iterator(train, trainer=trainer)
    model = json.loads(t.to_str())["model"]
    trained = sorted(model["vocab"].items(), key=lambda item: item[1])
    vocab = {}
    for token in specials:
        vocab[token] = len(vocab)
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in trained:
        if token not in vocab:
            vocab[token] = len(vocab)
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    out = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if normalizer is not None:
        out.normalizer = normalizer
    if pre_tokenizer is not None:
        out.pre_tokenizer = pre_tokenizer
    out.decoder = decoder
    out.add_special_tokens(specials)
    out.post_processor = template(out)
    return out


def bos_template(bos):
    def make(t):
        return processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                             special_tokens=[(bos, t.token_to_id(bos))])
    return make


def main():
    corpus_path, out_dir = sys.argv[1], sys.argv[2]
    with open(corpus_path, encoding="utf-8") as f:
        varied = json.load(f)
    train, held = halves()

    configs = {}
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|start_header_id|>",
                       "<|end_header_id|>", "<|eot_id|>"]

    def llama3_post(t):
        return processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            bos_template("<|begin_of_text|>")(t)])

    configs["llama3"] = byte_level_family(
        "llama3", train,
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated", invert=False),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]),
        None, llama3_post, decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True), llama3_specials)

    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # Added tokens beyond Qwen2's own, for the flags: a non-special token matched in normalised
    # text, one that swallows spaces on both sides, one that must stand alone as a word.
    qwen_extra = [AddedToken("<tool_call>", special=False, normalized=True),
                  AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False),
                  AddedToken("cat", special=False, single_word=True, normalized=False)]
    configs["qwen2"] = byte_level_family(
        "qwen2", train,
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated", invert=False),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        normalizers.NFC(), lambda t: processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False), qwen_specials, qwen_extra)

    configs["smollm2"] = byte_level_family(
        "smollm2", train,
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]),
        None, lambda t: processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True), qwen_specials)

    llama2_decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                        decoders.Strip(" ", 1, 0)])
    configs["llama2"] = sentencepiece_family(
        train, normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]), None,
        llama2_decoder, ["<unk>", "<s>", "</s>"], bos_template("<s>"))

    # Mistral / Llama files converted without the legacy normaliser: Metaspace, prepend only first.
    configs["mistral"] = sentencepiece_family(
        train, None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first"),
        decoders.Metaspace(replacement="\u2581", add_prefix_space=True), ["<unk>", "<s>", "</s>"], bos_template("<s>"))

    configs["gemma"] = sentencepiece_family(
        train, normalizers.Replace(" ", "\u2581"), None,
        decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]),
        ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], bos_template("<bos>"))

    # Every Split behaviour, inverted or not, and the other splitters, on the Llama 3 stand-in's
    # model: a regex with lookahead and Unicode classes, a literal, Digits runs.
    behaviors = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]
    base = configs["llama3"]
    for behavior in behaviors:
        for invert in (False, True):
            t = Tokenizer.from_str(base.to_str())
            t.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\s+(?!\S)|\p{P}+|(?<=\d)(?=\p{L})"), behavior, invert=invert),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            configs["split_%s%s" % (behavior, "_invert" if invert else "")] = t
    t = Tokenizer.from_str(base.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("in", "merged_with_next"),
                                               pre_tokenizers.Digits(individual_digits=False),
                                               pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    configs["split_literal_digits"] = t

    specials_text = {
        "llama3": ["<|begin_of_text|>Hello<|eot_id|>", "a <|start_header_id|>user<|end_header_id|>\n\nhi there<|eot_id|> b",
                   "<|end_of_text|> after <|reserved_special_token_0|>x"],
        "qwen2": ["<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n", "a  [MASK]  b", "the cat sat on concatenate cat",
                  "call <tool_call> now<|endoftext|>"],
        "smollm2": ["<|im_start|>user 12345<|im_end|>", "x<|endoftext|>y"],
        "llama2": ["<s>Hello</s>", "text <s> inside </s> more <unk> end", "<s> [INST] hi [/INST]"],
        "mistral": ["<s>Hello</s>", "text <s> inside </s> more", "<s>[INST] hi [/INST]"],
        "gemma": ["<bos><start_of_turn>user\nhi<end_of_turn>\n", "a <eos> b <pad>"],
    }

    out = {"configs": []}
    for name, tok in configs.items():
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what the file says, nothing else
        cases = []
        for text in held + varied + HARD + specials_text.get(name, specials_text["llama3"]):
            enc = tok.encode(text)
            cases.append({"text": text, "ids": enc.ids, "ids_plain": tok.encode(text, add_special_tokens=False).ids,
                          "offsets": [list(o) for o in enc.offsets],
                          "decoded": tok.decode(enc.ids), "decoded_all": tok.decode(enc.ids, skip_special_tokens=False)})
        # Decoding alone: random id lists (specials, byte tokens that form no valid UTF-8, pieces
        # with the metaspace at odd places) through the decoders.
        rng = random.Random(42)
        size = tok.get_vocab_size()
        decodes = []
        for _ in range(60):
            ids = [rng.randrange(0, 300) if rng.random() < 0.6 else rng.randrange(0, size) for _ in range(rng.randrange(1, 13))]
            decodes.append({"ids": ids, "decoded": tok.decode(ids), "decoded_all": tok.decode(ids, skip_special_tokens=False)})
        out["configs"].append({"name": name, "dir": d, "cases": cases, "decodes": decodes, "train_lines": len(train),
                               "vocab_size": size})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
