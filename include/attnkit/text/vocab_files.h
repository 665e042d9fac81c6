#pragma once
// The classic vocabulary files:
//   vocab.txt                 WordPiece (BERT): one token per line, id = line number - 1
//   vocab.json / encoder.json byte-level BPE (GPT-2): {"token": id, ...}
//   merges.txt / vocab.bpe    byte-level BPE merges: optional "#version" line, then "left right"
// Readers throw attnkit::Error naming the file (and line) for a missing file, malformed content,
// invalid UTF-8, duplicate tokens, or merges that use tokens the vocabulary lacks.
#include <string>
#include <vector>

#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/vocabulary.h"

namespace attnkit::text {

Vocabulary read_vocab_txt(const std::string& path);
void write_vocab_txt(const Vocabulary& vocabulary, const std::string& path);

Vocabulary read_vocab_json(const std::string& path);
void write_vocab_json(const Vocabulary& vocabulary, const std::string& path);

std::vector<Merge> read_merges_txt(const std::string& path, const Vocabulary& vocabulary);
void write_merges_txt(const std::vector<Merge>& merges, const std::string& path);

}  // namespace attnkit::text
