#include "attnkit/text/pre_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "attnkit/error.h"
#include "attnkit/text/unicode.h"
#include "onig_regex.h"

namespace attnkit::text {
namespace {

bool is_bert_punctuation(char32_t c) {
  const bool ascii_punctuation = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return ascii_punctuation || unicode::is_punctuation(c);
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

namespace {

// Appends the pieces of one Metaspace part (characters [part_begin, part_end) of `text`).
void split_metaspace_part(const MetaspacePreTokenizer& metaspace, const AlignedText& text, size_t part_begin, size_t part_end,
                          bool first, std::vector<AlignedText>& pieces) {
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
  if (!metaspace.split) {
    pieces.push_back(std::move(replaced));
    return;
  }
  size_t begin = 0;
  for (size_t i = 1; i <= replaced.size(); ++i) {
    if (i == replaced.size() || replaced.chars[i] == metaspace.replacement) {
      pieces.push_back(replaced.slice(begin, i));
      begin = i;
    }
  }
}

void split_metaspace(const MetaspacePreTokenizer& metaspace, const AlignedText& text, bool first, std::vector<AlignedText>& pieces) {
  if (!metaspace.whitespace_split) {
    split_metaspace_part(metaspace, text, 0, text.size(), first, pieces);
    return;
  }
  bool first_word = first;
  for (size_t i = 0; i < text.size();) {
    if (unicode::is_whitespace(text.chars[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !unicode::is_whitespace(text.chars[end])) ++end;
    split_metaspace_part(metaspace, text, i, end, first_word, pieces);
    first_word = false;
    i = end;
  }
}

// ---- Split and Digits: matches, then the behaviour ------------------------------------------------

struct Span {
  size_t begin;
  size_t end;
  bool match;
};

// The matches of `split` in characters [begin, end) of `text` and the stretches between them,
// covering the range in order (as HF's Pattern::find_matches), in characters of `text`.
std::vector<Span> split_matches(const SplitPreTokenizer& split, const AlignedText& text, size_t begin, size_t end) {
  std::string utf8;
  std::vector<size_t> offsets;  // offsets[i]: byte offset of character begin + i; then the end
  offsets.reserve(end - begin + 1);
  for (size_t i = begin; i < end; ++i) {
    offsets.push_back(utf8.size());
    const char32_t c = text.chars[i];
    unicode::append_utf8(utf8, c > 0x10FFFF ? unicode::kReplacementCharacter : c);  // a raw byte: U+FFFD
  }
  offsets.push_back(utf8.size());
  auto char_at = [&](size_t byte) {
    return begin + static_cast<size_t>(std::lower_bound(offsets.begin(), offsets.end(), byte) - offsets.begin());
  };
  std::vector<Span> spans;
  size_t previous = begin;
  for (const auto& [byte_begin, byte_end] : split.compiled->find_all(utf8)) {
    const size_t match_begin = char_at(byte_begin);
    const size_t match_end = char_at(byte_end);
    if (previous != match_begin) spans.push_back({previous, match_begin, false});
    spans.push_back({match_begin, match_end, true});
    previous = match_end;
  }
  if (previous != end) spans.push_back({previous, end, false});
  return spans;
}

std::vector<Span> digit_matches(const AlignedText& text, size_t begin, size_t end) {
  std::vector<Span> spans;
  size_t previous = begin;
  for (size_t i = begin; i < end; ++i) {
    if (!unicode::is_number(text.chars[i])) continue;
    if (previous < i) spans.push_back({previous, i, false});
    spans.push_back({i, i + 1, true});
    previous = i + 1;
  }
  if (previous < end) spans.push_back({previous, end, false});
  return spans;
}

// HF's NormalizedString::split: the stretches that become pieces under `behavior`.
std::vector<std::pair<size_t, size_t>> kept_by_behavior(std::vector<Span> spans, SplitBehavior behavior, bool invert) {
  if (invert) {
    for (Span& span : spans) span.match = !span.match;
  }
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& span : spans) {
        if (!span.match) kept.emplace_back(span.begin, span.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Span& span : spans) kept.emplace_back(span.begin, span.end);
      break;
    case SplitBehavior::kContiguous:          // runs of matches, and runs of the rest, join
    case SplitBehavior::kMergedWithPrevious:  // a match joins the stretch before it
      for (const Span& span : spans) {
        const bool join = behavior == SplitBehavior::kContiguous ? span.match == previous_match : span.match && !previous_match;
        if (join && !kept.empty()) {
          kept.back().second = span.end;
        } else {
          kept.emplace_back(span.begin, span.end);
        }
        previous_match = span.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().first = it->begin;
        } else {
          kept.emplace_back(it->begin, it->end);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  return kept;
}

std::vector<std::pair<size_t, size_t>> split_bert_ranges(const AlignedText& text, size_t begin, size_t end) {
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t start = begin;
  for (size_t i = begin; i < end; ++i) {
    const char32_t c = text.chars[i];
    if (unicode::is_whitespace(c)) {
      if (i > start) ranges.emplace_back(start, i);
      start = i + 1;
    } else if (is_bert_punctuation(c)) {
      if (i > start) ranges.emplace_back(start, i);
      ranges.emplace_back(i, i + 1);
      start = i + 1;
    }
  }
  if (end > start) ranges.emplace_back(start, end);
  return ranges;
}

// A piece: characters [begin, end) of a text that is either the input or one a step made
// (Metaspace's replacement, ByteLevel's prefix space), kept in a deque so pieces can point into it.
struct Piece {
  const AlignedText* text;
  size_t begin;
  size_t end;
};
using PieceTexts = std::deque<AlignedText>;

// One step on one piece; `first`: the piece starts its input (Metaspace's "first" scheme).
void split_piece(const PreTokenizer& step, Piece piece, bool first, PieceTexts& texts, std::vector<Piece>& out) {
  auto keep = [&](const AlignedText* text, const std::vector<std::pair<size_t, size_t>>& ranges) {
    for (const auto& [begin, end] : ranges) {
      if (end > begin) out.push_back({text, begin, end});
    }
  };
  const AlignedText& text = *piece.text;
  if (std::holds_alternative<BertPreTokenizer>(step)) {
    keep(&text, split_bert_ranges(text, piece.begin, piece.end));
  } else if (const auto* byte_level = std::get_if<ByteLevelPreTokenizer>(&step)) {
    Piece source = piece;
    if (byte_level->add_prefix_space && piece.end > piece.begin && text.chars[piece.begin] != U' ') {
      AlignedText& prefixed = texts.emplace_back();  // ' ' before the piece, aligned with its first character
      prefixed.push_back(U' ', text.origin[piece.begin]);
      prefixed.chars.append(text.chars, piece.begin, piece.end - piece.begin);
      prefixed.origin.insert(prefixed.origin.end(), text.origin.begin() + static_cast<std::ptrdiff_t>(piece.begin),
                             text.origin.begin() + static_cast<std::ptrdiff_t>(piece.end));
      source = {&prefixed, 0, prefixed.size()};
    }
    if (!byte_level->use_regex) {
      if (source.end > source.begin) out.push_back(source);
    } else {
      const std::u32string_view chars = std::u32string_view(source.text->chars).substr(source.begin, source.end - source.begin);
      for (const auto& [begin, end] : split_gpt2(chars)) out.push_back({source.text, source.begin + begin, source.begin + end});
    }
  } else if (const auto* metaspace = std::get_if<MetaspacePreTokenizer>(&step)) {
    std::vector<AlignedText> parts;
    split_metaspace(*metaspace, text.slice(piece.begin, piece.end), first, parts);
    for (AlignedText& part : parts) {
      const AlignedText& stored = texts.emplace_back(std::move(part));
      if (!stored.empty()) out.push_back({&stored, 0, stored.size()});
    }
  } else if (const auto* split = std::get_if<SplitPreTokenizer>(&step)) {
    keep(&text, kept_by_behavior(split_matches(*split, text, piece.begin, piece.end), split->behavior, split->invert));
  } else if (const auto* digits = std::get_if<DigitsPreTokenizer>(&step)) {
    keep(&text, kept_by_behavior(digit_matches(text, piece.begin, piece.end),
                                 digits->individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false));
  } else if (const auto* sequence = std::get_if<SequencePreTokenizer>(&step)) {
    std::vector<Piece> pieces{piece};
    std::vector<Piece> next;
    for (const PreTokenizer& inner : sequence->steps->steps) {
      next.clear();
      for (size_t k = 0; k < pieces.size(); ++k) split_piece(inner, pieces[k], first && k == 0, texts, next);
      pieces.swap(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  } else if (piece.end > piece.begin) {  // NoPreTokenizer
    out.push_back(piece);
  }
}

}  // namespace

SplitPreTokenizer make_split(std::string pattern, bool regex, SplitBehavior behavior, bool invert) {
  SplitPreTokenizer split{std::move(pattern), regex, behavior, invert, nullptr};
  // As HF: a literal is compiled as its escaped regex.
  split.compiled = std::make_shared<OnigRegex>(regex ? split.pattern : onig_escape(split.pattern), "Split pre_tokenizer");
  return split;
}

std::optional<SplitBehavior> split_behavior_from_string(const std::string& name) {
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved}, {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious}, {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [text, behavior] : kNames) {
    if (name == text) return behavior;
  }
  return std::nullopt;
}

const char* split_behavior_name(SplitBehavior behavior) {
  switch (behavior) {
    case SplitBehavior::kRemoved: return "Removed";
    case SplitBehavior::kIsolated: return "Isolated";
    case SplitBehavior::kMergedWithPrevious: return "MergedWithPrevious";
    case SplitBehavior::kMergedWithNext: return "MergedWithNext";
    case SplitBehavior::kContiguous: return "Contiguous";
  }
  return "Isolated";
}

bool contains_byte_level(const PreTokenizer& pre_tokenizer) {
  if (std::holds_alternative<ByteLevelPreTokenizer>(pre_tokenizer)) return true;
  const auto* sequence = std::get_if<SequencePreTokenizer>(&pre_tokenizer);
  if (sequence == nullptr) return false;
  for (const auto& step : sequence->steps->steps) {
    if (contains_byte_level(step)) return true;
  }
  return false;
}

bool ends_in_byte_level(const PreTokenizer& pre_tokenizer) {
  if (std::holds_alternative<ByteLevelPreTokenizer>(pre_tokenizer)) return true;
  const auto* sequence = std::get_if<SequencePreTokenizer>(&pre_tokenizer);
  return sequence != nullptr && !sequence->steps->steps.empty() && ends_in_byte_level(sequence->steps->steps.back());
}

SequencePreTokenizer make_sequence(std::vector<PreTokenizer> steps) {
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (contains_byte_level(steps[i]))
      throw Error(fmt::format("pre_tokenizer Sequence: ByteLevel is step {} of {}; it may only be the last step", i + 1, steps.size()));
  }
  auto list = std::make_shared<PreTokenizerSteps>();
  list->steps = std::move(steps);
  return SequencePreTokenizer{std::move(list)};
}

std::vector<Word> pre_tokenize(const PreTokenizer& pre_tokenizer, const AlignedText& text, bool first) {
  PieceTexts texts;
  std::vector<Piece> pieces;
  split_piece(pre_tokenizer, {&text, 0, text.size()}, first, texts, pieces);
  std::vector<Word> words;
  words.reserve(pieces.size());
  for (const Piece& piece : pieces) words.push_back(Word::from(*piece.text, piece.begin, piece.end));
  return words;
}

}  // namespace attnkit::text
