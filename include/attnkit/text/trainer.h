#pragma once
// Training vocabularies from text files (one text per line), so a model can be trained from
// scratch on a local corpus with no downloads.
//   train_wordpiece:      BERT pipeline (normaliser + basic tokenizer), then BPE-style merges over
//                         characters with "##" continuations; the vocabulary is the special
//                         tokens, every character seen, then the merged pieces.
//   train_byte_level_bpe: GPT-2 pipeline (byte-level pre-tokenizer), merges over the 256 byte
//                         tokens; the vocabulary is the special tokens, the 256 bytes, the merges.
//   train_unigram:        SentencePiece-style Unigram (NFKC, Metaspace): seed pieces are the most
//                         frequent substrings of the words (up to 16 characters), then EM rounds
//                         (expected piece counts by forward-backward, Bayesian M-step with
//                         digamma, pieces expected less than 0.5 times dropped) alternate with
//                         pruning the pieces whose removal costs the corpus least likelihood, as
//                         SentencePiece and HF do, until vocab_size pieces remain (every
//                         character kept). Not identical to HF's trainer, but the same method.
// Merges take the most frequent adjacent pair (ties: the pair of lower ids) until the vocabulary
// reaches vocab_size or no pair occurs min_frequency times. Invalid UTF-8 in the corpus is
// treated as the tokenizers treat it when encoding (raw bytes for BPE, dropped for WordPiece).
#include <string>
#include <vector>

#include "attnkit/text/tokenizer.h"

namespace attnkit::text {

struct WordPieceTrainerOptions {
  size_t vocab_size = 30000;
  uint64_t min_frequency = 2;
  bool lowercase = true;
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  int threads = 0;  // for counting words; 0: all cores
};

struct BpeTrainerOptions {
  size_t vocab_size = 8000;
  uint64_t min_frequency = 2;
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  int threads = 0;
};

struct UnigramTrainerOptions {
  size_t vocab_size = 8000;
  std::vector<std::string> special_tokens = {"<unk>", "[CLS]", "[SEP]", "<pad>", "[MASK]"};
  std::string unk_token = "<unk>";  // must be one of special_tokens
  size_t max_piece_length = 16;     // characters
  double shrinking_factor = 0.75;   // fraction of pieces kept by each pruning round
  int em_iterations = 2;            // EM rounds before each pruning
  int threads = 0;
};

// Throws attnkit::Error for unreadable files or a vocab_size too small for the special tokens
// and the alphabet.
Tokenizer train_wordpiece(const std::vector<std::string>& files, const WordPieceTrainerOptions& options);
Tokenizer train_byte_level_bpe(const std::vector<std::string>& files, const BpeTrainerOptions& options);
Tokenizer train_unigram(const std::vector<std::string>& files, const UnigramTrainerOptions& options);

}  // namespace attnkit::text
