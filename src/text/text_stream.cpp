#include "attnkit/text/text_stream.h"

namespace attnkit::text {

size_t complete_utf8_prefix(const std::string& text) {
  const size_t end = text.size();
  size_t back = 0;  // continuation bytes at the end
  while (back < 4 && back < end && (static_cast<unsigned char>(text[end - 1 - back]) & 0xC0) == 0x80)
    ++back;
  if (back == end) return end;
  const auto lead = static_cast<unsigned char>(text[end - 1 - back]);
  const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return need > back + 1 ? end - 1 - back : end;
}

std::string TextStream::decoded() const { return tokenizer_.decode_ids(tokens_, true, style_); }

std::string TextStream::add(int64_t token) {
  tokens_.push_back(token);
  const std::string text = decoded();
  const size_t end = complete_utf8_prefix(text);
  if (end <= returned_.size() || text.compare(0, returned_.size(), returned_) != 0) return {};
  std::string piece = text.substr(returned_.size(), end - returned_.size());
  returned_ = text.substr(0, end);
  return piece;
}

std::string TextStream::finish() const {
  if (tokens_.empty()) return {};
  const std::string text = decoded();
  if (text.size() <= returned_.size() || text.compare(0, returned_.size(), returned_) != 0) return {};
  return text.substr(returned_.size());
}

}  // namespace attnkit::text
