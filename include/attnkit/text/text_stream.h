#pragma once
// The text of a growing token sequence, piece by piece, for printing tokens as they are generated.
// add() decodes the whole sequence and returns the text not returned before, holding back a
// trailing incomplete UTF-8 character (a byte-level BPE token may end inside one) until its last
// byte arrives; while the decoded text no longer starts with what was returned (a decoder that
// rewrites earlier text), it returns nothing. finish() returns what is still held back. Any
// TextTokenizer (a Tokenizer, Marian's). No LibTorch.
#include "attnkit/text/text_tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::text {

// The length of the longest prefix of `text` that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& text);

class TextStream {
 public:
  explicit TextStream(const TextTokenizer& tokenizer, TextStyle style = TextStyle::kTokenizer)
      : tokenizer_(tokenizer), style_(style) {}
  std::string add(int64_t token);
  std::string finish() const;

 private:
  std::string decoded() const;

  const TextTokenizer& tokenizer_;
  TextStyle style_;
  std::vector<int64_t> tokens_;
  std::string returned_;  // the text returned so far
};

}  // namespace attnkit::text
