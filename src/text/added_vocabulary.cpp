#include "attnkit/text/added_vocabulary.h"

#include <algorithm>

#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

bool is_word_char(char32_t c) { return c == U'_' || unicode::is_alphanumeric(c); }

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    patterns_.push_back({unicode::decode_utf8(tokens_[i].content, unicode::InvalidUtf8::kReplace), i});
  }
  std::stable_sort(patterns_.begin(), patterns_.end(),
                   [](const Pattern& a, const Pattern& b) { return a.chars.size() > b.chars.size(); });
}

const AddedToken* AddedVocabulary::find_by_id(uint32_t id) const {
  for (const auto& token : tokens_) {
    if (token.id == id) return &token;
  }
  return nullptr;
}

const AddedToken* AddedVocabulary::find_by_content(const std::string& content) const {
  for (const auto& token : tokens_) {
    if (token.content == content) return &token;
  }
  return nullptr;
}

std::vector<TextSegment> AddedVocabulary::split(const AlignedText& text, bool normalized) const {
  std::vector<TextSegment> segments;
  const std::u32string& chars = text.chars;
  size_t text_start = 0;  // start of the ordinary text not yet emitted
  size_t pos = 0;
  while (pos < chars.size()) {
    const Pattern* match = nullptr;
    for (const Pattern& pattern : patterns_) {
      const AddedToken& token = tokens_[pattern.token];
      if (token.normalized != normalized) continue;
      if (chars.compare(pos, pattern.chars.size(), pattern.chars) != 0) continue;
      const size_t end = pos + pattern.chars.size();
      if (token.single_word && ((pos > 0 && is_word_char(chars[pos - 1])) || (end < chars.size() && is_word_char(chars[end])))) {
        continue;
      }
      match = &pattern;
      break;
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[match->token];
    size_t begin = pos;
    size_t end = pos + match->chars.size();
    if (token.lstrip) {
      while (begin > text_start && unicode::is_whitespace(chars[begin - 1])) --begin;
    }
    if (token.rstrip) {
      while (end < chars.size() && unicode::is_whitespace(chars[end])) ++end;
    }
    if (begin > text_start) segments.push_back({text_start, begin, nullptr});
    segments.push_back({begin, end, &token});
    text_start = end;
    pos = end;
  }
  if (text_start < chars.size()) segments.push_back({text_start, chars.size(), nullptr});
  return segments;
}

}  // namespace attnkit::text
