#include "attnkit/text/aligned_text.h"

#include "attnkit/text/unicode.h"

namespace attnkit::text {

AlignedText AlignedText::slice(size_t begin, size_t end) const {
  AlignedText out;
  out.chars = chars.substr(begin, end - begin);
  out.origin.assign(origin.begin() + static_cast<std::ptrdiff_t>(begin),
                    origin.begin() + static_cast<std::ptrdiff_t>(end));
  return out;
}

AlignedText AlignedText::identity(std::u32string chars) {
  AlignedText out;
  out.origin.resize(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) out.origin[i] = static_cast<uint32_t>(i);
  out.chars = std::move(chars);
  return out;
}

Word Word::from(const AlignedText& text, size_t begin, size_t end) {
  Word word;
  word.bytes.reserve(end - begin);
  word.byte_origin.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    unicode::append_utf8(word.bytes, text.chars[i]);
    word.byte_origin.resize(word.bytes.size(), text.origin[i]);
  }
  return word;
}

}  // namespace attnkit::text
