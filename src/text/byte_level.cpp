#include "attnkit/text/byte_level.h"

#include "attnkit/text/unicode.h"

namespace attnkit::text::byte_level {
namespace {

bool maps_to_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8{};
  std::array<int16_t, 0x100 + 68> from_char{};  // byte for each mapped character, -1 for others
  Tables() {
    from_char.fill(-1);
    char32_t next = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      to_char[byte] = maps_to_itself(byte) ? static_cast<char32_t>(byte) : next++;
      unicode::append_utf8(to_utf8[byte], to_char[byte]);
      from_char[to_char[byte]] = static_cast<int16_t>(byte);
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

char32_t byte_to_char(uint8_t byte) { return tables().to_char[byte]; }

std::optional<uint8_t> char_to_byte(char32_t c) {
  const auto& from_char = tables().from_char;
  if (c >= from_char.size() || from_char[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(from_char[c]);
}

std::string bytes_to_token(std::string_view bytes) {
  const auto& utf8 = tables().to_utf8;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char byte : bytes) out += utf8[static_cast<uint8_t>(byte)];
  return out;
}

std::optional<std::string> token_to_bytes(std::string_view token) {
  std::string out;
  for (char32_t c : unicode::decode_utf8(token, unicode::InvalidUtf8::kReplace)) {
    auto byte = char_to_byte(c);
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
  }
  return out;
}

}  // namespace attnkit::text::byte_level
