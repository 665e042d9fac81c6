"""Hugging Face tokenizers (the official Python binding) as the reference for attnkit's Unigram
tokenizers. Run with the test venv's python (scripts/peer_python.sh):
    hf_unigram_reference.py CORPUS.json OUT_DIR
Trains a Unigram tokenizer on the corpus (UnigramTrainer), derives variants with other
normalisers (Nmt/NFKC/Replace/Strip/Lowercase, an ALBERT-like Sequence with a Precompiled
charsmap built here) and byte fallback, saves each as OUT_DIR/NAME/tokenizer.json, and prints
JSON: {"configs": [{"name", "dir", "cases": [{"text", "ids", "offsets", "decoded", "normalized"}]}]}."""
import json
import os
import struct
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPECIALS = ["<unk>", "[CLS]", "[SEP]", "<pad>"]


def darts_charsmap(mapping):
    """SentencePiece's precompiled charsmap for {key: replacement}: a Darts-clone double-array trie
    (one unique 256-aligned base per node, so child = base + label) and the NUL-terminated values."""
    normalized = b""
    values = {}
    for key, value in sorted(mapping.items()):
        values[key.encode()] = len(normalized)
        normalized += value.encode() + b"\0"
    trie = {}
    for key in values:
        node = trie
        for b in key:
            node = node.setdefault(b, {})
        node[None] = values[key]
    units = {}
    next_base = 256

    def place(node, pos, label):
        nonlocal next_base
        base = next_base
        next_base += 256
        offset = pos ^ base
        assert offset < (1 << 21)
        unit = label | (offset << 10)
        if None in node:
            unit |= 1 << 8
            units[base] = node[None] | (1 << 31)
        units[pos] = unit
        for b, child in sorted((k, v) for k, v in node.items() if k is not None):
            place(child, base ^ b, b)

    place(trie, 0, 0)
    size = max(units) + 1
    array = b"".join(struct.pack("<I", units.get(i, 0)) for i in range(size))
    return struct.pack("<I", len(array)) + array + normalized


CHARSMAP = {
    "\uff21": "A", "\uff42": "b", "\ufb01": "fi", "\u2460": "1", "\u3000": " ", "\u2026": "...",
    "\u00e9": "e\u0301", "e\u0301": "\u00e9", "\u200b": "", "\u00bd": "1\u20442", "\u2163": "IV",
    "\u201c": "\"", "\u201d": "\"", "\u2019": "'", "\u00a0": " ",
}


def varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def field(number, wire, payload):
    key = varint((number << 3) | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def sentencepiece_model(pieces, charsmap, unk_id):
    """A SentencePiece ModelProto: pieces (piece, score, type), trainer_spec (model_type UNIGRAM,
    unk_id), normalizer_spec (name, precompiled_charsmap, add_dummy_prefix, remove_extra_whitespaces,
    escape_whitespaces), written with the protobuf wire format by hand."""
    out = b""
    for piece, score, kind in pieces:
        out += field(1, 2, field(1, 2, piece.encode()) + field(2, 5, struct.pack("<f", score)) + field(3, 0, varint(kind)))
    out += field(2, 2, field(3, 0, varint(1)) + field(4, 0, varint(len(pieces))) + field(40, 0, varint(unk_id)))
    out += field(3, 2, field(1, 2, b"test_charsmap") + field(2, 2, charsmap) + field(3, 0, varint(1)) +
                 field(4, 0, varint(1)) + field(5, 0, varint(1)))
    return out


def normalize(steps, text):
    # (Sequence.normalize_str in the 0.15 binding returns its input unchanged; chain the steps.)
    for step in steps:
        text = step.normalize_str(text)
    return text


def template(tok):
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    return processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                         special_tokens=[("[CLS]", cls), ("[SEP]", sep)])


def main():
    corpus_path, out_dir = sys.argv[1], sys.argv[2]
    with open(corpus_path, encoding="utf-8") as f:
        texts = json.load(f)
    extra = ["Hello world", "", " ", "  leading and   inner  spaces ", "\uff21\uff42 \ufb01ne \u2460 \u2026 caf\u00e9 cafe\u0301",
             "zero\u200bwidth \u00bd \u2163 \u201cquoted\u201d it\u2019s", "``tex'' quotes", "tab\there\nnewline\u3000ideo",
             "ctrl\x01\x7fchars \ufeffbom", "emoji \U0001F600 and \u4e2d\u6587 \uc548\ub155", "<unk> [CLS] literal"]
    texts = texts + extra

    base = Tokenizer(models.Unigram())
    base.normalizer = normalizers.NFKC()
    base.pre_tokenizer = pre_tokenizers.Metaspace()
    base.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=SPECIALS, unk_token="<unk>", show_progress=False)
    base.train_from_iterator(texts * 3, trainer=trainer)
    base.post_processor = template(base)

    configs = {"trained": base}

    t = Tokenizer.from_str(base.to_str())
    steps = {"trained": [normalizers.NFKC()], "byte_fallback": []}
    steps["nmt"] = [normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " "),
                    normalizers.Lowercase(), normalizers.Strip()]
    t.normalizer = normalizers.Sequence(steps["nmt"])
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    configs["nmt"] = t

    t = Tokenizer.from_str(base.to_str())
    steps["albert"] = [
        normalizers.Replace("``", "\""), normalizers.Replace("''", "\""), normalizers.NFKD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Precompiled(darts_charsmap(CHARSMAP)), normalizers.Replace(Regex(" {2,}"), " ")]
    t.normalizer = normalizers.Sequence(steps["albert"])
    configs["albert"] = t

    t = Tokenizer.from_str(base.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    steps["t5_legacy"] = steps["trained"]
    configs["t5_legacy"] = t

    t = Tokenizer.from_str(base.to_str())
    steps["precompiled"] = [normalizers.Precompiled(darts_charsmap(CHARSMAP)), normalizers.NFC(), normalizers.NFD()]
    t.normalizer = normalizers.Sequence(steps["precompiled"])
    configs["precompiled"] = t

    model = json.loads(base.to_str())["model"]
    vocab = [tuple(item) for item in model["vocab"]] + [("<0x%02X>" % b, -30.0) for b in range(256)]
    t = Tokenizer(models.Unigram(vocab, model["unk_id"], True))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.add_special_tokens(SPECIALS)
    t.post_processor = template(t)
    configs["byte_fallback"] = t

    # A SentencePiece .model with the trained pieces (float32 scores) and the charsmap, and the HF
    # tokenizer that means the same: what attnkit must build from the .model alone.
    f32 = [(p, struct.unpack("<f", struct.pack("<f", sc))[0]) for p, sc in model["vocab"]]
    kinds = [2 if p == "<unk>" else 3 if p in SPECIALS else 1 for p, _ in f32]
    spm_bytes = sentencepiece_model([(p, sc, k) for (p, sc), k in zip(f32, kinds)], darts_charsmap(CHARSMAP), model["unk_id"])
    t = Tokenizer(models.Unigram(f32, model["unk_id"], False))
    steps["spm"] = [normalizers.Precompiled(darts_charsmap(CHARSMAP)), normalizers.Strip(),
                    normalizers.Replace(Regex(" {2,}"), " ")]
    t.normalizer = normalizers.Sequence(steps["spm"])
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.add_special_tokens([p for p, k in zip(SPECIALS, [0, 1, 1, 1]) if k])
    t.post_processor = template(t)
    configs["spm"] = t

    out = {"configs": []}
    for name, tok in configs.items():
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        if name == "spm":
            with open(os.path.join(d, "spiece.model"), "wb") as f:
                f.write(spm_bytes)
        else:
            tok.save(os.path.join(d, "tokenizer.json"))
        cases = []
        for text in texts:
            enc = tok.encode(text)
            cases.append({"text": text, "ids": enc.ids, "offsets": [list(o) for o in enc.offsets],
                          "decoded": tok.decode(enc.ids),
                          "normalized": normalize(steps[name], text)})
        out["configs"].append({"name": name, "dir": d, "cases": cases})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
