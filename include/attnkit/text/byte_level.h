#pragma once
// GPT-2's byte <-> unicode map: every byte gets a printable character so that byte-level BPE
// vocabularies can be stored as text. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map
// to themselves; the other 68 bytes map, in byte order, to U+0100, U+0101, ... (space -> 'Ġ').
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace attnkit::text::byte_level {

// The character for `byte`.
char32_t byte_to_char(uint8_t byte);
// The byte for `c`, or nullopt when `c` is not one of the 256 characters.
std::optional<uint8_t> char_to_byte(char32_t c);
// UTF-8 of byte_to_char(byte) for every byte of `bytes` (e.g. " hi" -> "Ġhi").
std::string bytes_to_token(std::string_view bytes);
// Inverse of bytes_to_token; nullopt when `token` holds a character outside the map.
std::optional<std::string> token_to_bytes(std::string_view token);

}  // namespace attnkit::text::byte_level
