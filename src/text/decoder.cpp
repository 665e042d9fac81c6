#include "attnkit/text/decoder.h"

#include "attnkit/text/byte_level.h"
#include "attnkit/text/unicode.h"

namespace attnkit::text {
namespace {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// The clean-up of the reference WordPiece decoder, applied to each token with its leading space.
void clean_up_tokenization(std::string& text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) replace_all(text, from, to);
}

std::string decode_wordpiece(const WordPieceDecoder& decoder, const std::vector<std::string>& tokens) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string piece = tokens[i];
    if (i > 0) {
      if (piece.compare(0, decoder.prefix.size(), decoder.prefix) == 0) {
        piece.erase(0, decoder.prefix.size());
      } else {
        piece.insert(0, " ");
      }
    }
    if (decoder.cleanup) clean_up_tokenization(piece);
    out += piece;
  }
  return out;
}

bool is_cjk_wide(char32_t c) {
  return unicode::is_cjk_ideograph(c) || (c >= 0x3000 && c <= 0x30FF) || (c >= 0xFF00 && c <= 0xFFEF) ||
         (c >= 0x31F0 && c <= 0x31FF);
}

std::string decode_byte_level(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& token : tokens) {
    if (auto bytes = byte_level::token_to_bytes(token)) {
      out += *bytes;
    } else {
      out += token;  // an added token outside the byte alphabet is kept as written
    }
  }
  return out;
}

}  // namespace

std::string decode_metaspace(const MetaspaceDecoder& decoder, const std::vector<std::string>& tokens) {
  std::string replacement;
  unicode::append_utf8(replacement, decoder.replacement);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    const bool drop = i == 0 && decoder.add_prefix_space && decoder.prepend_scheme != "never";
    for (size_t pos = 0; pos < token.size();) {
      if (token.compare(pos, replacement.size(), replacement) == 0) {
        if (!drop) out += ' ';
        pos += replacement.size();
      } else {
        out += token[pos++];
      }
    }
  }
  return out;
}

std::string decode_tokens(const Decoder& decoder, const std::vector<std::string>& tokens) {
  if (const auto* wordpiece = std::get_if<WordPieceDecoder>(&decoder)) return decode_wordpiece(*wordpiece, tokens);
  if (const auto* metaspace = std::get_if<MetaspaceDecoder>(&decoder)) return decode_metaspace(*metaspace, tokens);
  return decode_byte_level(tokens);
}

std::string join_cjk(const std::string& text) {
  const std::u32string chars = unicode::decode_utf8(text, unicode::InvalidUtf8::kReplace);
  std::u32string out;
  out.reserve(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    if (chars[i] == U' ' && !out.empty() && i + 1 < chars.size() &&
        (is_cjk_wide(out.back()) || is_cjk_wide(chars[i + 1])))
      continue;
    out.push_back(chars[i]);
  }
  return unicode::encode_utf8(out);
}

}  // namespace attnkit::text
