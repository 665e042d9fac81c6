#pragma once
// String helpers of the base layer (no LibTorch), shared by text/ and metrics/.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace attnkit {

namespace detail {
template <typename Char>
void replace_all(std::basic_string<Char>& s, std::basic_string_view<Char> from,
                 std::basic_string_view<Char> to) {
  if (from.empty()) return;
  std::basic_string<Char> out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::basic_string<Char>::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out.append(to);
  }
  out.append(s, at, std::basic_string<Char>::npos);
  s = std::move(out);
}
}  // namespace detail

// Replaces every occurrence of `from` in `s` by `to`, left to right; text a replacement wrote is
// not searched again. An empty `from` changes nothing.
inline void replace_all(std::string& s, std::string_view from, std::string_view to) {
  detail::replace_all<char>(s, from, to);
}
inline void replace_all(std::u32string& s, std::u32string_view from, std::u32string_view to) {
  detail::replace_all<char32_t>(s, from, to);
}

// 64-bit FNV-1a of the bytes (a fingerprint, not a cryptographic hash), from FNV's offset basis
// unless `basis` names another start.
inline uint64_t fnv1a64(std::string_view bytes, uint64_t basis = 14695981039346656037ull) {
  uint64_t h = basis;
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Whether `text` ends with `suffix`.
inline bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace attnkit
