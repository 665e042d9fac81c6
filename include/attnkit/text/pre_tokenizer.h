#pragma once
// Pre-tokenizers: split normalised text into the words a model tokenizes one by one.
//   BertPreTokenizer:      split on whitespace (dropped) and around every punctuation character
//                          (ASCII punctuation or Unicode P*), as BERT's basic tokenizer does.
//   ByteLevelPreTokenizer: GPT-2's rule, the regex
//                            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//                          implemented directly on utf8proc's categories (no regex library).
//   MetaspacePreTokenizer: SentencePiece's rule: every ' ' becomes the replacement (U+2581 '▁'), one
//                          is prepended (prepend_scheme "always", or "first": only at the start of
//                          the text), and the text splits before each replacement character.
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "attnkit/text/aligned_text.h"

namespace attnkit::text {

struct BertPreTokenizer {};

struct ByteLevelPreTokenizer {
  bool add_prefix_space = false;  // prepend ' ' unless the text starts with one
  bool use_regex = true;          // false: the whole text is one word
  bool trim_offsets = true;       // kept for tokenizer.json; offsets are trimmed by the post-processor
};

struct MetaspacePreTokenizer {
  char32_t replacement = U'\u2581';
  bool add_prefix_space = true;
  std::string prepend_scheme = "always";  // "always", "first" or "never"
  // Split on whitespace (dropped) first: tokenizer.json's Sequence [WhitespaceSplit, Metaspace],
  // as older T5 files have it.
  bool whitespace_split = false;
};

using PreTokenizer = std::variant<BertPreTokenizer, ByteLevelPreTokenizer, MetaspacePreTokenizer>;

// Character ranges [begin, end) of GPT-2's pre-tokens; they cover `chars` exactly.
std::vector<std::pair<size_t, size_t>> split_gpt2(std::u32string_view chars);

// `first`: whether `text` is the first part of its input the pre-tokenizer sees (added tokens split
// an input into parts); Metaspace's "first" prepend scheme prepends only there.
std::vector<Word> pre_tokenize(const PreTokenizer& pre_tokenizer, const AlignedText& text, bool first = true);

}  // namespace attnkit::text
