#pragma once
// Pre-tokenizers: split normalised text into the words a model tokenizes one by one.
//   BertPreTokenizer:      split on whitespace (dropped) and around every punctuation character
//                          (ASCII punctuation or Unicode P*), as BERT's basic tokenizer does.
//   ByteLevelPreTokenizer: GPT-2's rule, the regex
//                            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//                          implemented directly on utf8proc's categories (no regex library).
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

using PreTokenizer = std::variant<BertPreTokenizer, ByteLevelPreTokenizer>;

// Character ranges [begin, end) of GPT-2's pre-tokens; they cover `chars` exactly.
std::vector<std::pair<size_t, size_t>> split_gpt2(std::u32string_view chars);

std::vector<Word> pre_tokenize(const PreTokenizer& pre_tokenizer, const AlignedText& text);

}  // namespace attnkit::text
