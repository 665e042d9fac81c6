"""Throughput of Hugging Face tokenizers (the official Python binding) for bench/tokenizer_bench.cpp.
Usage: hf_bench.py TOKENIZER.json LINES.json REPEATS
         prints {"seconds": best wall time of encode_batch over all lines, "tokens": token count};
         run with RAYON_NUM_THREADS=N for N threads.
       hf_bench.py --train-unigram OUT_DIR VOCAB_SIZE FILE...
         trains an ALBERT-like Unigram tokenizer (Metaspace, NFKC + Lowercase) on the files' lines
         and saves OUT_DIR/tokenizer.json.
Run with the test venv's python (scripts/peer_python.sh)."""
import json
import os
import sys
import time

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers


def train_unigram(out_dir, vocab_size, files):
    lines = []
    for name in files:
        with open(name, encoding="utf-8", errors="replace") as f:
            lines += [line.rstrip("\n") for line in f if line.strip() and line.strip() != "%"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=int(vocab_size), special_tokens=["<unk>", "[CLS]", "[SEP]"],
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))


def main():
    if sys.argv[1] == "--train-unigram":
        train_unigram(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    tok = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        lines = json.load(f)
    tok.encode_batch(lines[:100], add_special_tokens=False)  # warm-up
    best, tokens = float("inf"), 0
    for _ in range(int(sys.argv[3])):
        start = time.perf_counter()
        encodings = tok.encode_batch(lines, add_special_tokens=False)
        best = min(best, time.perf_counter() - start)
        tokens = sum(len(e.ids) for e in encodings)
    json.dump({"seconds": best, "tokens": tokens}, sys.stdout)


if __name__ == "__main__":
    main()
