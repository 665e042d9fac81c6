#pragma once
// BERT's text normalisation (the normaliser half of BERT's "basic tokenizer"), with alignment:
//   clean_text:           drop NUL, U+FFFD and other (C*) characters; every whitespace -> ' '
//   handle_chinese_chars: put spaces around each CJK ideograph so it becomes its own word
//   strip_accents:        NFD, then drop non-spacing marks (Mn); defaults to `lowercase`
//   lowercase:            full Unicode lower-case mapping
// The steps run in this order, as in the Hugging Face tokenizers library.
// The SentencePiece-era normalisers of the Hugging Face library are steps of a Normalizer too:
//   NFC/NFD/NFKC/NFKD, Lowercase, StripAccents (drop combining marks), Strip (whitespace at the
//   ends), Replace (a literal or a regex; ECMAScript regex syntax), Nmt (SentencePiece's nmt rules:
//   drop some controls, map odd spaces to ' '), Precompiled (SentencePiece's precompiled charsmap),
//   Prepend (a string put before any non-empty text, as Llama 2's "▁").
// A Normalizer runs its steps in order; `sequence` records whether tokenizer.json wrote a Sequence.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "attnkit/text/aligned_text.h"

namespace attnkit::text {

struct BertNormalizer {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // nullopt: same as lowercase
  bool lowercase = true;
};

AlignedText normalize(const BertNormalizer& normalizer, const AlignedText& text);

struct UnicodeNormalizer {
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };
  Form form = Form::kNfkc;
};
struct LowercaseNormalizer {};
struct StripAccentsNormalizer {};
struct StripNormalizer {
  bool left = true;
  bool right = true;
};
struct NmtNormalizer {};
struct PrependNormalizer {
  std::string prepend;  // UTF-8
};

class CompiledPattern;  // a regex compiled once (normalizer.cpp)
struct ReplaceNormalizer {
  std::string pattern;  // UTF-8
  bool regex = false;   // false: `pattern` is a literal string
  std::string content;  // UTF-8 replacement
  std::shared_ptr<const CompiledPattern> compiled;  // set by make_replace
};
// Throws attnkit::Error when the regex does not compile.
ReplaceNormalizer make_replace(std::string pattern, bool regex, std::string content);

// SentencePiece's precompiled charsmap: a little-endian u32 trie size in bytes, a Darts-clone
// double-array trie of that size mapping UTF-8 keys to offsets, then NUL-terminated replacements.
class PrecompiledCharsmap {
 public:
  // Throws attnkit::Error (one line) for a truncated or inconsistent blob.
  explicit PrecompiledCharsmap(std::string blob);
  const std::string& blob() const { return blob_; }
  // The replacement of the shortest key that prefixes `key` (the first match, as SentencePiece and
  // the Hugging Face library take it), or nullptr when none does; `length` receives its size.
  const char* transform(std::string_view key, size_t* length) const;

 private:
  std::string blob_;
  std::vector<uint32_t> units_;
  std::string_view normalized_;
};
struct PrecompiledNormalizer {
  std::shared_ptr<const PrecompiledCharsmap> charsmap;
};

using NormalizerStep = std::variant<BertNormalizer, UnicodeNormalizer, LowercaseNormalizer, StripAccentsNormalizer,
                                    StripNormalizer, NmtNormalizer, ReplaceNormalizer, PrecompiledNormalizer,
                                    PrependNormalizer>;

struct Normalizer {
  std::vector<NormalizerStep> steps;
  bool sequence = false;
  Normalizer() = default;
  Normalizer(BertNormalizer bert) : steps{bert} {}  // NOLINT: a BERT normaliser is one step
  Normalizer(std::vector<NormalizerStep> list, bool is_sequence) : steps(std::move(list)), sequence(is_sequence) {}
};

AlignedText normalize(const NormalizerStep& step, const AlignedText& text);
AlignedText normalize(const Normalizer& normalizer, const AlignedText& text);

}  // namespace attnkit::text
