#pragma once
// Building tokenizers from vocabularies, and loading/saving them by path.
//   load_tokenizer(PATH): PATH is a tokenizer.json, a vocab.txt (WordPiece), a vocab.json or
//   encoder.json (byte-level BPE; merges.txt / vocab.bpe next to it; RoBERTa's pipeline when the
//   vocabulary holds <s> and </s>, else GPT-2's), or a directory holding one
//   of these (tried in that order: tokenizer.json, vocab.json+merges.txt, encoder.json+vocab.bpe,
//   vocab.txt).
//   load_text_tokenizer / find_text_tokenizer / tokenizer_for_model: any tokenizer attnkit reads,
//   as a TextTokenizer (Marian's files too), for the commands that only need ids and text.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/text/byte_level_bpe.h"
#include "attnkit/text/text_tokenizer.h"
#include "attnkit/text/tokenizer.h"

namespace attnkit::text {

struct BertTokenizerOptions {
  bool lowercase = true;  // uncased models; strip accents follows it
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string mask_token = "[MASK]";
};

// BERT's pipeline around a WordPiece vocabulary: BertNormalizer, BertPreTokenizer, [CLS]/[SEP]
// template (when both are in the vocabulary), the special tokens above as never-split tokens.
Tokenizer make_bert_tokenizer(const Vocabulary& vocabulary, const BertTokenizerOptions& options = {});

// GPT-2's pipeline around a byte-level BPE vocabulary: ByteLevel pre-tokenizer without prefix
// space, no added ids, offsets not trimmed, "<|endoftext|>" never split when present.
Tokenizer make_gpt2_tokenizer(const Vocabulary& vocabulary, std::vector<Merge> merges);

// RoBERTa's (and BART's) pipeline around a byte-level BPE vocabulary holding <s> and </s> (what
// load_tokenizer builds for such a vocab.json + merges.txt): GPT-2's pre-tokenizer and decoder,
// <s>, <pad>, </s>, <unk>, <mask> never split (<mask> strips the space on its left), and the
// template <s> A </s> / <s> A </s></s> B </s> with type ids 0.
Tokenizer make_roberta_tokenizer(const Vocabulary& vocabulary, std::vector<Merge> merges);

struct LoadOptions {
  BertTokenizerOptions bert;  // for a bare vocab.txt
};

Tokenizer load_tokenizer(const std::string& path, const LoadOptions& options = {});
// A model directory's tokenizer: load_tokenizer(directory) when it holds a tokenizer.json,
// vocab.json, encoder.json or vocab.txt; nullopt when it holds none (or is not a directory).
std::optional<Tokenizer> find_tokenizer(const std::string& directory, const LoadOptions& options = {});

// Any tokenizer: a directory holding Marian's files (source.spm + vocab.json; tried first) is a
// MarianTokenizer, everything else load_tokenizer's Tokenizer. Throws as load_tokenizer does.
std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::string& path, const LoadOptions& options = {});
// A model directory's tokenizer of any kind (Marian's files, else find_tokenizer's); nullptr when
// it holds none.
std::unique_ptr<TextTokenizer> find_text_tokenizer(const std::string& directory, const LoadOptions& options = {});
// The tokenizer a command uses with a model: load_text_tokenizer(given_path) when the user named
// one (--tokenizer), else find_text_tokenizer(model_directory).
std::unique_ptr<TextTokenizer> tokenizer_for_model(const std::string& given_path, const std::string& model_directory);

// Writes DIR/tokenizer.json and the classic files (vocab.txt, or vocab.json + merges.txt).
void save_tokenizer(const Tokenizer& tokenizer, const std::string& directory);

}  // namespace attnkit::text
