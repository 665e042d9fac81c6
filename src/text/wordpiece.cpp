#include "attnkit/text/wordpiece.h"

#include <fmt/format.h>

#include "attnkit/error.h"

namespace attnkit::text {
namespace {

size_t count_utf8_chars(std::string_view word) {
  size_t count = 0;
  for (char byte : word) count += (static_cast<unsigned char>(byte) & 0xC0) != 0x80;
  return count;
}

// Length of the last UTF-8 character of `text` (1 for a stray continuation byte run start).
size_t last_char_length(std::string_view text) {
  size_t length = 1;
  while (length < text.size() && length < 4 && (static_cast<unsigned char>(text[text.size() - length]) & 0xC0) == 0x80) {
    ++length;
  }
  return length;
}

}  // namespace

WordPiece::WordPiece(Vocabulary vocabulary, WordPieceOptions options)
    : vocabulary_(std::move(vocabulary)), options_(std::move(options)) {
  auto unk = vocabulary_.find(options_.unk_token);
  if (!unk) throw Error(fmt::format("WordPiece: the unknown token '{}' is not in the vocabulary", options_.unk_token));
  unk_id_ = *unk;
}

void WordPiece::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  const auto word_end = static_cast<uint32_t>(word.size());
  if (count_utf8_chars(word) > options_.max_input_chars_per_word) {
    out.push_back({unk_id_, 0, word_end});
    return;
  }
  const size_t first_piece = out.size();
  std::string candidate;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    bool found = false;
    while (end > start) {
      candidate.clear();
      if (start > 0) candidate += options_.continuing_subword_prefix;
      candidate.append(word.substr(start, end - start));
      if (auto id = vocabulary_.find(candidate)) {
        out.push_back({*id, static_cast<uint32_t>(start), static_cast<uint32_t>(end)});
        found = true;
        break;
      }
      end -= last_char_length(word.substr(start, end - start));
    }
    if (!found) {
      out.resize(first_piece);
      out.push_back({unk_id_, 0, word_end});
      return;
    }
    start = end;
  }
}

}  // namespace attnkit::text
