#include "attnkit/text/decoder.h"

#include <optional>

#include "attnkit/strings.h"
#include "attnkit/text/byte_level.h"
#include "attnkit/text/unicode.h"
#include "onig_regex.h"

namespace attnkit::text {
namespace {

// The clean-up of the reference WordPiece decoder, applied to each token with its leading space.
void clean_up_tokenization(std::string& text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) replace_all(text, from, to);
}

std::vector<std::string> chain_wordpiece(const WordPieceDecoder& decoder, std::vector<std::string> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& piece = tokens[i];
    if (i > 0) {
      if (piece.compare(0, decoder.prefix.size(), decoder.prefix) == 0) {
        piece.erase(0, decoder.prefix.size());
      } else {
        piece.insert(0, " ");
      }
    }
    if (decoder.cleanup) clean_up_tokenization(piece);
  }
  return tokens;
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

std::vector<std::string> chain_metaspace(const MetaspaceDecoder& decoder, std::vector<std::string> tokens) {
  std::string replacement;
  unicode::append_utf8(replacement, decoder.replacement);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    const bool drop = i == 0 && decoder.add_prefix_space && decoder.prepend_scheme != "never";
    std::string out;
    for (size_t pos = 0; pos < token.size();) {
      if (token.compare(pos, replacement.size(), replacement) == 0) {
        if (!drop) out += ' ';
        pos += replacement.size();
      } else {
        out += token[pos++];
      }
    }
    tokens[i] = std::move(out);
  }
  return tokens;
}

std::vector<std::string> chain_replace(const ReplaceDecoder& decoder, std::vector<std::string> tokens) {
  for (std::string& token : tokens) {
    std::string out;
    size_t previous = 0;
    // HF's tokens are Rust strings: raw bytes (a ByteLevel step before) are U+FFFD there.
    if (unicode::find_invalid_utf8(token) != std::string_view::npos)
      token = unicode::encode_utf8(unicode::decode_utf8(token, unicode::InvalidUtf8::kReplace));
    if (decoder.compiled) {
      for (const auto& [begin, end] : decoder.compiled->find_all(token)) {
        out.append(token, previous, begin - previous);
        out += decoder.content;
        previous = end;
      }
    } else if (!decoder.pattern.empty()) {
      for (size_t match = token.find(decoder.pattern); match != std::string::npos; match = token.find(decoder.pattern, previous)) {
        out.append(token, previous, match - previous);
        out += decoder.content;
        previous = match + decoder.pattern.size();
      }
    }
    out.append(token, previous, std::string::npos);
    token = std::move(out);
  }
  return tokens;
}

// The byte of a "<0xNN>" token (Rust's u8::from_str_radix on NN, which takes a leading '+').
std::optional<unsigned char> fallback_byte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token[3] == '+') {
    const int low = digit(token[4]);
    if (low < 0) return std::nullopt;
    return static_cast<unsigned char>(low);
  }
  const int high = digit(token[3]);
  const int low = digit(token[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<unsigned char>(high * 16 + low);
}

std::vector<std::string> chain_byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  size_t count = 0;  // byte tokens in `bytes`
  auto flush = [&] {
    if (count == 0) return;
    if (unicode::find_invalid_utf8(bytes) == std::string_view::npos) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");  // U+FFFD per byte token
    }
    bytes.clear();
    count = 0;
  };
  for (std::string& token : tokens) {
    if (const auto byte = fallback_byte(token)) {
      bytes.push_back(static_cast<char>(*byte));
      ++count;
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

std::vector<std::string> chain_strip(const StripDecoder& decoder, std::vector<std::string> tokens) {
  for (std::string& token : tokens) {
    const std::u32string chars = unicode::decode_utf8(token, unicode::InvalidUtf8::kKeepBytes);
    size_t begin = 0;
    while (begin < decoder.start && begin < chars.size() && chars[begin] == decoder.content) ++begin;
    size_t end = chars.size();
    for (size_t i = 0; i < decoder.stop && end > begin && chars[end - 1] == decoder.content; ++i) --end;
    token = unicode::encode_utf8(std::u32string_view(chars).substr(begin, end - begin));
  }
  return tokens;
}

std::vector<std::string> decode_chain(const Decoder& decoder, std::vector<std::string> tokens) {
  if (const auto* wordpiece = std::get_if<WordPieceDecoder>(&decoder)) return chain_wordpiece(*wordpiece, std::move(tokens));
  if (const auto* metaspace = std::get_if<MetaspaceDecoder>(&decoder)) return chain_metaspace(*metaspace, std::move(tokens));
  if (const auto* replace = std::get_if<ReplaceDecoder>(&decoder)) return chain_replace(*replace, std::move(tokens));
  if (std::holds_alternative<ByteFallbackDecoder>(decoder)) return chain_byte_fallback(std::move(tokens));
  if (const auto* strip = std::get_if<StripDecoder>(&decoder)) return chain_strip(*strip, std::move(tokens));
  if (const auto* sequence = std::get_if<SequenceDecoder>(&decoder)) {
    for (const Decoder& step : sequence->steps->steps) tokens = decode_chain(step, std::move(tokens));
    return tokens;
  }
  std::string joined;
  if (std::holds_alternative<ByteLevelDecoder>(decoder)) {
    joined = decode_byte_level(tokens);
  } else {  // Fuse
    for (const auto& token : tokens) joined += token;
  }
  return {std::move(joined)};
}

}  // namespace

ReplaceDecoder make_replace_decoder(std::string pattern, bool regex, std::string content) {
  ReplaceDecoder decoder{std::move(pattern), regex, std::move(content), nullptr};
  if (regex) decoder.compiled = std::make_shared<OnigRegex>(decoder.pattern, "Replace decoder");
  return decoder;
}

SequenceDecoder make_decoder_sequence(std::vector<Decoder> steps) {
  auto list = std::make_shared<DecoderSteps>();
  list->steps = std::move(steps);
  return SequenceDecoder{std::move(list)};
}

std::string decode_tokens(const Decoder& decoder, const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& piece : decode_chain(decoder, tokens)) out += piece;
  return out;
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
