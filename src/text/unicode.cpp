#include "attnkit/text/unicode.h"

#include <utf8proc.h>

namespace attnkit::text::unicode {
namespace {

utf8proc_category_t category(char32_t c) {
  if (c > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

// Decodes one UTF-8 sequence at text[pos]; returns its length, or 0 when it is invalid.
size_t decode_one(std::string_view text, size_t pos, char32_t& c) {
  utf8proc_int32_t code = 0;
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos);
  utf8proc_ssize_t length = utf8proc_iterate(bytes, static_cast<utf8proc_ssize_t>(text.size() - pos), &code);
  if (length <= 0) return 0;
  c = static_cast<char32_t>(code);
  return static_cast<size_t>(length);
}

}  // namespace

std::u32string decode_utf8(std::string_view text, InvalidUtf8 invalid) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t c = 0;
    const auto byte = static_cast<unsigned char>(text[pos]);
    if (byte < 0x80) {
      out.push_back(byte);
      ++pos;
    } else if (size_t length = decode_one(text, pos, c); length > 0) {
      out.push_back(c);
      pos += length;
    } else {
      out.push_back(invalid == InvalidUtf8::kKeepBytes ? kRawByteBase + byte : kReplacementCharacter);
      ++pos;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (is_raw_byte(c)) {
    out.push_back(static_cast<char>(c - kRawByteBase));
  } else {
    utf8proc_uint8_t buffer[4];
    utf8proc_ssize_t length = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buffer);
    out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    char32_t c = 0;
    size_t length = decode_one(text, pos, c);
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

bool is_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85) return true;
  if (c < 0x80) return false;
  auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_letter(char32_t c) {
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t c) {
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_other(char32_t c) {
  auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_CN || cat >= UTF8PROC_CATEGORY_CC;
}

bool is_nonspacing_mark(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_alphanumeric(char32_t c) { return is_letter(c) || is_number(c); }

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_nfd(std::u32string& out, char32_t c) {
  if (c < 0xC0 || c > 0x10FFFF) {  // nothing below U+00C0 decomposes canonically
    out.push_back(c);
    return;
  }
  utf8proc_int32_t buffer[8];
  int last_boundclass = 0;
  utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer, 8,
                                               UTF8PROC_DECOMPOSE, &last_boundclass);
  if (n <= 0 || n > 8) {
    out.push_back(c);
    return;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<char32_t>(buffer[i]));
}

void append_lowercase(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    return;
  }
  if (c > 0x10FFFF) {
    out.push_back(c);
    return;
  }
  // U+0130 (I with dot above) is the one character whose unconditional full lower-case mapping
  // (SpecialCasing.txt) is two characters; utf8proc only offers the simple one-character mapping.
  if (c == 0x130) {
    out.push_back(U'i');
    out.push_back(0x307);
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

}  // namespace attnkit::text::unicode
