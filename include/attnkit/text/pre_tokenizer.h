#pragma once
// Pre-tokenizers: split normalised text into the words a model tokenizes one by one.
//   BertPreTokenizer:      split on whitespace (dropped) and around every punctuation character
//                          (ASCII punctuation or Unicode P*), as BERT's basic tokenizer does.
//   ByteLevelPreTokenizer: GPT-2's rule, the regex
//                            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//                          implemented directly on utf8proc's categories (no regex library).
//   MetaspacePreTokenizer: SentencePiece's rule: every ' ' becomes the replacement (U+2581 '▁'), one
//                          is prepended (prepend_scheme "always", or "first": only at the start of
//                          the text), and the text splits before each replacement character
//                          (split == false: no split; the option of tokenizers >= 0.19).
//   SplitPreTokenizer:     tokenizer.json's Split: the matches of a pattern (a literal, or an
//                          Oniguruma regex as HF compiles it) cut the text; `behavior` says what
//                          becomes of each match (Removed, Isolated, MergedWithPrevious,
//                          MergedWithNext, Contiguous); `invert` swaps matches and the rest.
//   DigitsPreTokenizer:    each numeric character alone (individual_digits) or runs of them.
//   NoPreTokenizer:        tokenizer.json's null: the whole text is one word.
//   SequencePreTokenizer:  several of these in order, each on every piece the last one left. A
//                          ByteLevel step may only come last (the byte-level model maps bytes).
#include <memory>
#include <optional>
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
  bool split = true;  // false: the replaced text stays one word
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class OnigRegex;  // src/text/onig_regex.h
struct SplitPreTokenizer {
  std::string pattern;  // UTF-8
  bool regex = false;   // false: `pattern` is a literal string
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  std::shared_ptr<const OnigRegex> compiled;  // set by make_split
};
// Throws attnkit::Error naming the regex when it does not compile.
SplitPreTokenizer make_split(std::string pattern, bool regex, SplitBehavior behavior, bool invert);
// "Isolated" <-> SplitBehavior::kIsolated, ...; nullopt for another name.
std::optional<SplitBehavior> split_behavior_from_string(const std::string& name);
const char* split_behavior_name(SplitBehavior behavior);

struct DigitsPreTokenizer {
  bool individual_digits = false;
};

struct NoPreTokenizer {};

struct PreTokenizerSteps;  // below: the list a SequencePreTokenizer holds
struct SequencePreTokenizer {
  std::shared_ptr<const PreTokenizerSteps> steps;
};

using PreTokenizer = std::variant<BertPreTokenizer, ByteLevelPreTokenizer, MetaspacePreTokenizer, SplitPreTokenizer,
                                  DigitsPreTokenizer, NoPreTokenizer, SequencePreTokenizer>;

struct PreTokenizerSteps {
  std::vector<PreTokenizer> steps;
};
// Throws attnkit::Error when a step before the last holds a ByteLevel step.
SequencePreTokenizer make_sequence(std::vector<PreTokenizer> steps);
// Whether `pre_tokenizer` is ByteLevel or holds one, and whether its last step is ByteLevel.
bool contains_byte_level(const PreTokenizer& pre_tokenizer);
bool ends_in_byte_level(const PreTokenizer& pre_tokenizer);

// Character ranges [begin, end) of GPT-2's pre-tokens; they cover `chars` exactly.
std::vector<std::pair<size_t, size_t>> split_gpt2(std::u32string_view chars);

// `first`: whether `text` is the first part of its input the pre-tokenizer sees (added tokens split
// an input into parts); Metaspace's "first" prepend scheme prepends only there.
std::vector<Word> pre_tokenize(const PreTokenizer& pre_tokenizer, const AlignedText& text, bool first = true);

}  // namespace attnkit::text
