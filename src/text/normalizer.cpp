#include "attnkit/text/normalizer.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <re2/re2.h>

#include "attnkit/error.h"

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

// ---- SentencePiece-era normalisers ---------------------------------------------------------------

// RE2 (linear time in the text, no recursion: a hostile tokenizer.json cannot make it blow the
// stack or run for ever); multi-line, so ^ and $ also match at line breaks as in Oniguruma (HF's
// engine). RE2 has no backreferences or lookaround; such a pattern is refused when it is read.
class CompiledPattern {
 public:
  explicit CompiledPattern(const std::string& pattern) : regex("(?m)" + pattern, options()) {}
  RE2 regex;

 private:
  static RE2::Options options() {
    RE2::Options o;
    o.set_log_errors(false);
    return o;
  }
};

namespace {

int combining_class(char32_t c) {
  if (c < 0x300 || c > 0x10FFFF) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// Appends `replacement` for the characters [begin, end) of `text`: the j-th new character comes
// from the original character of min(j, count - 1), as the reference aligns a replacement.
void append_replacement(AlignedText& out, const AlignedText& text, size_t begin, size_t end,
                        std::u32string_view replacement) {
  for (size_t j = 0; j < replacement.size(); ++j) {
    const size_t from = begin + std::min(j, end - begin - 1);
    out.push_back(replacement[j], text.origin[from]);
  }
}

// Replace's alignment: every new character comes from the last character of the match.
void append_match_replacement(AlignedText& out, const AlignedText& text, size_t begin, size_t end,
                              std::u32string_view replacement) {
  for (char32_t c : replacement) out.push_back(c, text.origin[end - 1]);
}

AlignedText normalize_unicode(const UnicodeNormalizer& step, const AlignedText& text) {
  using Form = UnicodeNormalizer::Form;
  const bool compat = step.form == Form::kNfkc || step.form == Form::kNfkd;
  const bool compose = step.form == Form::kNfc || step.form == Form::kNfkc;
  const auto decompose_options = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  AlignedText out;
  out.chars.reserve(text.size());
  out.origin.reserve(text.size());
  // Decompose every character on its own (exact origins), then reorder and compose each segment
  // that starts at a starter (combining class 0).
  std::vector<std::pair<char32_t, uint32_t>> segment;
  std::vector<utf8proc_int32_t> buffer;
  std::vector<uint32_t> origins;
  auto flush = [&] {
    if (segment.empty()) return;
    // Canonical ordering: stable sort of each run of non-starters by combining class. The
    // characters move, their origins stay in place (HF aligns reordered marks by position).
    origins.clear();
    for (const auto& item : segment) origins.push_back(item.second);
    for (size_t i = 0; i < segment.size();) {
      if (combining_class(segment[i].first) == 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < segment.size() && combining_class(segment[j].first) != 0) ++j;
      std::stable_sort(segment.begin() + static_cast<std::ptrdiff_t>(i), segment.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const auto& a, const auto& b) { return combining_class(a.first) < combining_class(b.first); });
      i = j;
    }
    for (size_t k = 0; k < segment.size(); ++k) segment[k].second = origins[k];
    if (!compose || segment.size() == 1) {
      for (const auto& [c, from] : segment) out.push_back(c, from);
    } else {
      buffer.clear();
      for (const auto& item : segment) buffer.push_back(static_cast<utf8proc_int32_t>(item.first));
      utf8proc_ssize_t n = utf8proc_normalize_utf32(buffer.data(), static_cast<utf8proc_ssize_t>(buffer.size()),
                                                    static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE));
      if (n < 0) n = 0;
      for (utf8proc_ssize_t j = 0; j < n; ++j) {
        const size_t from = std::min(static_cast<size_t>(j), segment.size() - 1);
        out.push_back(static_cast<char32_t>(buffer[j]), segment[from].second);
      }
    }
    segment.clear();
  };
  utf8proc_int32_t decomposed[32];
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text.chars[i];
    const uint32_t from = text.origin[i];
    if (c < 0xA0) {  // nothing below U+00A0 decomposes, and every such character is a starter
      flush();
      segment.emplace_back(c, from);
      continue;
    }
    int boundclass = 0;
    utf8proc_ssize_t n = c > 0x10FFFF ? -1
                                      : utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), decomposed, 32,
                                                                decompose_options, &boundclass);
    if (n <= 0 || n > 32) {
      flush();
      segment.emplace_back(c, from);
      continue;
    }
    for (utf8proc_ssize_t j = 0; j < n; ++j) {
      const auto d = static_cast<char32_t>(decomposed[j]);
      // A starter begins a segment, except Hangul vowel and trailing jamo (they compose with the
      // leading jamo before them).
      const bool hangul_tail = (d >= 0x1161 && d <= 0x1175) || (d >= 0x11A8 && d <= 0x11C2);
      if (combining_class(d) == 0 && !hangul_tail) flush();
      segment.emplace_back(d, from);
    }
  }
  flush();
  return out;
}

bool is_combining_mark(char32_t c) {
  if (c < 0x300 || c > 0x10FFFF) return false;
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_MC || category == UTF8PROC_CATEGORY_ME;
}

AlignedText normalize_replace(const ReplaceNormalizer& step, const AlignedText& text) {
  const std::u32string content = unicode::decode_utf8(step.content, unicode::InvalidUtf8::kReplace);
  AlignedText out;
  out.chars.reserve(text.size());
  out.origin.reserve(text.size());
  if (!step.regex) {
    const std::u32string pattern = unicode::decode_utf8(step.pattern, unicode::InvalidUtf8::kReplace);
    if (pattern.empty()) return text;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t match = text.chars.find(pattern, pos);
      const size_t stop = match == std::u32string::npos ? text.size() : match;
      for (size_t i = pos; i < stop; ++i) out.push_back(text.chars[i], text.origin[i]);
      if (match == std::u32string::npos) break;
      append_match_replacement(out, text, match, match + pattern.size(), content);
      pos = match + pattern.size();
    }
    return out;
  }
  // The text as UTF-8 (a raw byte, which is no character, as U+FFFD), with each character's byte
  // offset; RE2 matches whole characters, so every match starts and ends at one of them.
  std::string utf8;
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (char32_t c : text.chars) {
    offsets.push_back(utf8.size());
    unicode::append_utf8(utf8, c > 0x10FFFF ? unicode::kReplacementCharacter : c);
  }
  offsets.push_back(utf8.size());
  auto char_at = [&](size_t byte) {
    return static_cast<size_t>(std::lower_bound(offsets.begin(), offsets.end(), byte) - offsets.begin());
  };
  const re2::StringPiece whole(utf8);
  size_t pos = 0;       // characters copied or replaced so far
  size_t search = 0;    // byte where the next search starts
  re2::StringPiece match;
  while (search <= utf8.size() &&
         step.compiled->regex.Match(whole, search, utf8.size(), RE2::UNANCHORED, &match, 1)) {
    const size_t begin_byte = static_cast<size_t>(match.data() - utf8.data());
    const size_t begin = char_at(begin_byte), end = char_at(begin_byte + match.size());
    if (end == begin) {  // an empty match replaces nothing; go on after the next character
      if (begin >= text.size()) break;
      search = offsets[begin + 1];
      continue;
    }
    for (size_t i = pos; i < begin; ++i) out.push_back(text.chars[i], text.origin[i]);
    append_match_replacement(out, text, begin, end, content);
    pos = end;
    search = offsets[end];
  }
  for (size_t i = pos; i < text.size(); ++i) out.push_back(text.chars[i], text.origin[i]);
  return out;
}

AlignedText normalize_precompiled(const PrecompiledCharsmap& charsmap, const AlignedText& text) {
  AlignedText out;
  out.chars.reserve(text.size());
  out.origin.reserve(text.size());
  std::string bytes;
  size_t begin = 0;
  utf8proc_int32_t state = 0;
  auto emit = [&](size_t first, size_t last) {  // characters [first, last): one grapheme cluster
    size_t length = 0;
    if (last - first > 0) {
      bytes.clear();
      for (size_t i = first; i < last; ++i) unicode::append_utf8(bytes, text.chars[i]);
      if (bytes.size() < 6) {
        if (const char* norm = charsmap.transform(bytes, &length)) {
          append_replacement(out, text, first, last, unicode::decode_utf8(std::string_view(norm, length), unicode::InvalidUtf8::kReplace));
          return;
        }
      }
    }
    for (size_t i = first; i < last; ++i) {
      bytes.clear();
      unicode::append_utf8(bytes, text.chars[i]);
      if (const char* norm = charsmap.transform(bytes, &length)) {
        append_replacement(out, text, i, i + 1, unicode::decode_utf8(std::string_view(norm, length), unicode::InvalidUtf8::kReplace));
      } else {
        out.push_back(text.chars[i], text.origin[i]);
      }
    }
  };
  for (size_t i = 1; i <= text.size(); ++i) {
    const bool boundary =
        i == text.size() || text.chars[i - 1] > 0x10FFFF || text.chars[i] > 0x10FFFF ||
        utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(text.chars[i - 1]),
                                         static_cast<utf8proc_int32_t>(text.chars[i]), &state);
    if (boundary) {
      emit(begin, i);
      begin = i;
      state = 0;
    }
  }
  return out;
}

}  // namespace

ReplaceNormalizer make_replace(std::string pattern, bool regex, std::string content) {
  ReplaceNormalizer step{std::move(pattern), regex, std::move(content), nullptr};
  if (regex) {
    if (unicode::find_invalid_utf8(step.pattern) != std::string_view::npos)
      throw Error("Replace normalizer: the regex is not valid UTF-8");
    step.compiled = std::make_shared<CompiledPattern>(step.pattern);
    if (!step.compiled->regex.ok())
      throw Error(fmt::format("Replace normalizer: regex '{}' does not compile (RE2 syntax: no backreferences or "
                              "lookaround): {}", step.pattern, step.compiled->regex.error()));
  }
  return step;
}

PrecompiledCharsmap::PrecompiledCharsmap(std::string blob) : blob_(std::move(blob)) {
  if (blob_.size() < 4) throw Error(fmt::format("precompiled charsmap is truncated: {} bytes, no trie size", blob_.size()));
  const auto* data = reinterpret_cast<const unsigned char*>(blob_.data());
  const uint32_t trie_size = data[0] | (data[1] << 8) | (data[2] << 16) | (static_cast<uint32_t>(data[3]) << 24);
  if (trie_size % 4 != 0 || trie_size == 0) throw Error(fmt::format("precompiled charsmap: trie size {} is not a positive multiple of 4", trie_size));
  if (static_cast<uint64_t>(trie_size) + 4 > blob_.size()) {
    throw Error(fmt::format("precompiled charsmap is truncated: the trie needs {} bytes, {} remain", trie_size, blob_.size() - 4));
  }
  units_.resize(trie_size / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const unsigned char* u = data + 4 + 4 * i;
    units_[i] = u[0] | (u[1] << 8) | (u[2] << 16) | (static_cast<uint32_t>(u[3]) << 24);
  }
  normalized_ = std::string_view(blob_).substr(4 + trie_size);
}

const char* PrecompiledCharsmap::transform(std::string_view key, size_t* length) const {
  // Darts-clone units: bit 8 has_leaf, bits 0-7 (+31) label, bits 10-31 offset (shifted by 8 when bit 9).
  auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  const uint32_t size = static_cast<uint32_t>(units_.size());
  uint32_t pos = offset(units_[0]);
  for (unsigned char byte : key) {
    pos ^= byte;
    if (pos >= size) return nullptr;
    const uint32_t unit = units_[pos];
    if ((unit & ((1u << 31) | 0xFFu)) != byte) return nullptr;
    pos ^= offset(unit);
    if (pos >= size) return nullptr;
    if ((unit >> 8) & 1u) {
      const uint32_t value = units_[pos] & ((1u << 31) - 1);
      if (value >= normalized_.size()) return nullptr;
      const char* begin = normalized_.data() + value;
      *length = strnlen(begin, normalized_.size() - value);
      return begin;
    }
  }
  return nullptr;
}

AlignedText normalize(const NormalizerStep& step, const AlignedText& text) {
  if (const auto* bert = std::get_if<BertNormalizer>(&step)) return normalize(*bert, text);
  if (const auto* unicode_form = std::get_if<UnicodeNormalizer>(&step)) return normalize_unicode(*unicode_form, text);
  if (const auto* replace = std::get_if<ReplaceNormalizer>(&step)) return normalize_replace(*replace, text);
  if (const auto* precompiled = std::get_if<PrecompiledNormalizer>(&step)) return normalize_precompiled(*precompiled->charsmap, text);
  if (const auto* prepend = std::get_if<PrependNormalizer>(&step)) {
    if (text.empty()) return text;
    AlignedText out;  // the prepended characters align with the first one, as in HF
    for (char32_t c : unicode::decode_utf8(prepend->prepend, unicode::InvalidUtf8::kReplace)) out.push_back(c, text.origin[0]);
    out.chars += text.chars;
    out.origin.insert(out.origin.end(), text.origin.begin(), text.origin.end());
    return out;
  }
  AlignedText out;
  out.chars.reserve(text.size());
  out.origin.reserve(text.size());
  if (std::holds_alternative<LowercaseNormalizer>(step)) {
    std::u32string lowered;
    for (size_t i = 0; i < text.size(); ++i) {
      lowered.clear();
      unicode::append_lowercase(lowered, text.chars[i]);
      for (char32_t l : lowered) out.push_back(l, text.origin[i]);
    }
  } else if (std::holds_alternative<StripAccentsNormalizer>(step)) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!is_combining_mark(text.chars[i])) out.push_back(text.chars[i], text.origin[i]);
    }
  } else if (const auto* strip = std::get_if<StripNormalizer>(&step)) {
    size_t begin = 0;
    size_t end = text.size();
    if (strip->left) while (begin < end && unicode::is_whitespace(text.chars[begin])) ++begin;
    if (strip->right) while (end > begin && unicode::is_whitespace(text.chars[end - 1])) --end;
    return text.slice(begin, end);
  } else {  // Nmt
    for (size_t i = 0; i < text.size(); ++i) {
      const char32_t c = text.chars[i];
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F) continue;
      const bool space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
                         c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD;
      out.push_back(space ? U' ' : c, text.origin[i]);
    }
  }
  return out;
}

AlignedText normalize(const Normalizer& normalizer, const AlignedText& text) {
  if (normalizer.steps.size() == 1) return normalize(normalizer.steps[0], text);
  AlignedText current = text;
  for (const auto& step : normalizer.steps) current = normalize(step, current);
  return current;
}

}  // namespace attnkit::text
