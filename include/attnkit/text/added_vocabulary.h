#pragma once
// Added tokens: strings that are never split ([CLS], [MASK], <|endoftext|>, ...). They are found in
// the text before the model runs: tokens with normalized == false in the original text, tokens
// with normalized == true in the normalised text; at each position the longest one wins.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/text/aligned_text.h"

namespace attnkit::text {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = true;       // skipped by decode(..., skip_special_tokens = true)
  bool single_word = false;  // only matches when not inside a word
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = false;   // matched in the normalised text instead of the original
};

// A piece of text: either an added token (token set) or text still to tokenize.
struct TextSegment {
  size_t begin;  // character range in the text that was split
  size_t end;
  const AddedToken* token;  // nullptr for ordinary text
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_by_id(uint32_t id) const;
  const AddedToken* find_by_content(const std::string& content) const;
  bool empty() const { return tokens_.empty(); }

  // Splits `text` at the tokens whose `normalized` flag equals `normalized`.
  std::vector<TextSegment> split(const AlignedText& text, bool normalized) const;

 private:
  struct Pattern {
    std::u32string chars;
    size_t token;
  };
  std::vector<AddedToken> tokens_;
  std::vector<Pattern> patterns_;  // longest first
};

}  // namespace attnkit::text
