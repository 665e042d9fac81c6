#pragma once
// Text in flight through a tokenizer, with every piece tied back to the caller's original text.
//   AlignedText: characters (normalised or not) and, for each, the index of the original character
//                it came from (several characters may share an origin after NFD or lower-casing).
//   Word:        one pre-token as the bytes a model sees, and for each byte its original character.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::text {

struct AlignedText {
  std::u32string chars;
  std::vector<uint32_t> origin;  // origin[i]: index of the original character chars[i] came from

  void push_back(char32_t c, uint32_t from) {
    chars.push_back(c);
    origin.push_back(from);
  }
  size_t size() const { return chars.size(); }
  bool empty() const { return chars.empty(); }
  // Characters [begin, end) as a new AlignedText.
  AlignedText slice(size_t begin, size_t end) const;
  // Every character's origin is its own index: the starting point for a text to encode.
  static AlignedText identity(std::u32string chars);
};

struct Word {
  std::string bytes;                 // UTF-8, or raw bytes where the input was not valid UTF-8
  std::vector<uint32_t> byte_origin;  // byte_origin[i]: original character of bytes[i]

  // Characters [begin, end) of `text`, encoded as UTF-8 (raw-byte characters as their byte).
  static Word from(const AlignedText& text, size_t begin, size_t end);
};

}  // namespace attnkit::text
