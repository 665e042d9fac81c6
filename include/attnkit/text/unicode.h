#pragma once
// Unicode helpers for the tokenizers: UTF-8 decoding that keeps or replaces invalid bytes, and the
// character classes the BERT and GPT-2 rules are written in. Every property comes from utf8proc.
#include <cstdint>
#include <string>
#include <string_view>

namespace attnkit::text::unicode {

// Invalid UTF-8 bytes decoded with InvalidUtf8::kKeepBytes become kRawByteBase + byte: a value above
// U+10FFFF that no character has. append_utf8 writes such a value back as the original byte, so
// byte-level tokenizers reproduce their input exactly. Every class below treats them as "other".
constexpr char32_t kRawByteBase = 0x110000;
constexpr char32_t kReplacementCharacter = 0xFFFD;

enum class InvalidUtf8 {
  kKeepBytes,  // each invalid byte becomes kRawByteBase + byte
  kReplace,    // each invalid byte becomes U+FFFD
};

std::u32string decode_utf8(std::string_view text, InvalidUtf8 invalid);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view text);

// Byte offset of the first invalid UTF-8 sequence, or std::string_view::npos when valid.
size_t find_invalid_utf8(std::string_view text);

inline bool is_raw_byte(char32_t c) { return c >= kRawByteBase && c < kRawByteBase + 256; }

bool is_whitespace(char32_t c);   // Unicode White_Space: categories Zs/Zl/Zp, U+0009..U+000D, U+0085
bool is_letter(char32_t c);       // categories L*
bool is_number(char32_t c);       // categories N*
bool is_punctuation(char32_t c);  // categories P*
bool is_other(char32_t c);        // categories C* (control, format, unassigned, private use)
bool is_nonspacing_mark(char32_t c);  // category Mn
bool is_alphanumeric(char32_t c);     // L* or N*

// The CJK Unified Ideograph blocks BERT isolates, as the Hugging Face tokenizers library lists them.
bool is_cjk_ideograph(char32_t c);

// Appends the canonical decomposition (NFD) of one character.
void append_nfd(std::u32string& out, char32_t c);
// Appends the full lower-case mapping of one character (one or two characters).
void append_lowercase(std::u32string& out, char32_t c);

}  // namespace attnkit::text::unicode
