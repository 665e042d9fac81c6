#include "attnkit/text/normalizer.h"

#include "attnkit/text/unicode.h"

namespace attnkit::text {

AlignedText normalize(const BertNormalizer& normalizer, const AlignedText& text) {
  const bool strip_accents = normalizer.strip_accents.value_or(normalizer.lowercase);
  AlignedText out;
  out.chars.reserve(text.size());
  out.origin.reserve(text.size());
  std::u32string decomposed;
  std::u32string lowered;
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t c = text.chars[i];
    const uint32_t from = text.origin[i];
    if (normalizer.clean_text) {
      // Tab, newline and carriage return are controls that count as whitespace; other controls
      // (vertical tab, form feed, U+0085 included) are dropped like format and unassigned characters.
      const bool kept_control = c == U'\t' || c == U'\n' || c == U'\r';
      if (c == 0 || c == unicode::kReplacementCharacter || (unicode::is_other(c) && !kept_control)) continue;
      if (unicode::is_whitespace(c)) c = U' ';
    }
    const bool isolate = normalizer.handle_chinese_chars && unicode::is_cjk_ideograph(c);
    if (isolate) out.push_back(U' ', from);
    decomposed.clear();
    if (strip_accents) {
      unicode::append_nfd(decomposed, c);
    } else {
      decomposed.push_back(c);
    }
    for (char32_t d : decomposed) {
      if (strip_accents && unicode::is_nonspacing_mark(d)) continue;
      if (normalizer.lowercase) {
        lowered.clear();
        unicode::append_lowercase(lowered, d);
        for (char32_t l : lowered) out.push_back(l, from);
      } else {
        out.push_back(d, from);
      }
    }
    if (isolate) out.push_back(U' ', from);
  }
  return out;
}

}  // namespace attnkit::text
