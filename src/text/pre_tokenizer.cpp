#include "attnkit/text/pre_tokenizer.h"

#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

bool is_bert_punctuation(char32_t c) {
  const bool ascii_punctuation = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return ascii_punctuation || unicode::is_punctuation(c);
}

std::vector<Word> split_bert(const AlignedText& text) {
  std::vector<Word> words;
  size_t start = 0;
  auto flush = [&](size_t end) {
    if (end > start) words.push_back(Word::from(text, start, end));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t c = text.chars[i];
    if (unicode::is_whitespace(c)) {
      flush(i);
      start = i + 1;
    } else if (is_bert_punctuation(c)) {
      flush(i);
      words.push_back(Word::from(text, i, i + 1));
      start = i + 1;
    }
  }
  flush(text.size());
  return words;
}

enum class CharClass { kLetter, kNumber, kWhitespace, kOther };

CharClass classify(char32_t c) {
  if (c < 0x80) {  // fast path for ASCII
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::kWhitespace;
    return CharClass::kOther;
  }
  if (unicode::is_letter(c)) return CharClass::kLetter;
  if (unicode::is_number(c)) return CharClass::kNumber;
  if (unicode::is_whitespace(c)) return CharClass::kWhitespace;
  return CharClass::kOther;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) starting at `pos`, or 0.
size_t contraction_length(std::u32string_view chars, size_t pos) {
  if (chars[pos] != U'\'' || pos + 1 >= chars.size()) return 0;
  char32_t a = chars[pos + 1];
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (pos + 2 >= chars.size()) return 0;
  char32_t b = chars[pos + 2];
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_gpt2(std::u32string_view chars) {
  const size_t n = chars.size();
  std::vector<CharClass> classes(n);
  for (size_t i = 0; i < n; ++i) classes[i] = classify(chars[i]);
  auto run_end = [&](size_t pos, CharClass cls) {
    while (pos < n && classes[pos] == cls) ++pos;
    return pos;
  };

  std::vector<std::pair<size_t, size_t>> pieces;
  size_t pos = 0;
  while (pos < n) {
    size_t end = pos;
    if (size_t length = contraction_length(chars, pos)) {
      end = pos + length;
    } else {
      // " ?X+" for X in letters, numbers, other symbols: an optional leading space (U+0020 only).
      size_t body = (chars[pos] == U' ' && pos + 1 < n && classes[pos + 1] != CharClass::kWhitespace) ? pos + 1 : pos;
      if (classes[body] != CharClass::kWhitespace) {
        end = run_end(body, classes[body]);
      } else {
        // "\s+(?!\S)" leaves the last whitespace character to the next word; "\s+" otherwise.
        size_t whitespace_end = run_end(pos, CharClass::kWhitespace);
        end = whitespace_end;
        if (whitespace_end < n && whitespace_end - pos > 1) end = whitespace_end - 1;
      }
    }
    pieces.emplace_back(pos, end);
    pos = end;
  }
  return pieces;
}

void split_metaspace_part(const MetaspacePreTokenizer& metaspace, const AlignedText& text, size_t part_begin, size_t part_end,
                          bool first, std::vector<Word>& words) {
  if (part_begin == part_end) return;
  AlignedText replaced;
  replaced.chars.reserve(part_end - part_begin + 1);
  replaced.origin.reserve(part_end - part_begin + 1);
  const char32_t lead = text.chars[part_begin];
  const bool prepend = metaspace.add_prefix_space && lead != U' ' && lead != metaspace.replacement &&
                       (metaspace.prepend_scheme == "always" || (metaspace.prepend_scheme == "first" && first));
  if (prepend) replaced.push_back(metaspace.replacement, text.origin[part_begin]);
  for (size_t i = part_begin; i < part_end; ++i) {
    replaced.push_back(text.chars[i] == U' ' ? metaspace.replacement : text.chars[i], text.origin[i]);
  }
  size_t begin = 0;
  for (size_t i = 1; i <= replaced.size(); ++i) {
    if (i == replaced.size() || replaced.chars[i] == metaspace.replacement) {
      words.push_back(Word::from(replaced, begin, i));
      begin = i;
    }
  }
}

std::vector<Word> split_metaspace(const MetaspacePreTokenizer& metaspace, const AlignedText& text, bool first) {
  std::vector<Word> words;
  if (!metaspace.whitespace_split) {
    split_metaspace_part(metaspace, text, 0, text.size(), first, words);
    return words;
  }
  for (size_t i = 0; i < text.size();) {
    if (unicode::is_whitespace(text.chars[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !unicode::is_whitespace(text.chars[end])) ++end;
    split_metaspace_part(metaspace, text, i, end, first && words.empty(), words);
    i = end;
  }
  return words;
}

std::vector<Word> pre_tokenize(const PreTokenizer& pre_tokenizer, const AlignedText& text, bool first) {
  if (std::holds_alternative<BertPreTokenizer>(pre_tokenizer)) return split_bert(text);
  if (const auto* metaspace = std::get_if<MetaspacePreTokenizer>(&pre_tokenizer)) return split_metaspace(*metaspace, text, first);
  const auto& byte_level = std::get<ByteLevelPreTokenizer>(pre_tokenizer);
  const AlignedText* source = &text;
  AlignedText prefixed;
  if (byte_level.add_prefix_space && !text.empty() && text.chars[0] != U' ') {
    prefixed.push_back(U' ', text.origin[0]);
    prefixed.chars += text.chars;
    prefixed.origin.insert(prefixed.origin.end(), text.origin.begin(), text.origin.end());
    source = &prefixed;
  }
  std::vector<Word> words;
  if (!byte_level.use_regex) {
    if (!source->empty()) words.push_back(Word::from(*source, 0, source->size()));
    return words;
  }
  for (auto [begin, end] : split_gpt2(source->chars)) words.push_back(Word::from(*source, begin, end));
  return words;
}

}  // namespace attnkit::text
