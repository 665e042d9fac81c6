#pragma once
// Decoders: turn tokens back into text.
//   WordPieceDecoder: join with spaces, glue "##" pieces to their left neighbour, and (cleanup)
//                     remove the spaces BERT's tokenization put before punctuation and contractions.
//   ByteLevelDecoder: concatenate and map the byte-level characters back to the original bytes,
//                     so decode(encode(x)) == x for any byte string.
//   MetaspaceDecoder: concatenate, the replacement character back to ' ' (dropped in the first
//                     token when a prefix space was added).
#include <string>
#include <variant>
#include <vector>

namespace attnkit::text {

struct WordPieceDecoder {
  std::string prefix = "##";
  bool cleanup = true;
};

struct ByteLevelDecoder {};

struct MetaspaceDecoder {
  char32_t replacement = U'\u2581';
  bool add_prefix_space = true;
  std::string prepend_scheme = "always";
};

using Decoder = std::variant<WordPieceDecoder, ByteLevelDecoder, MetaspaceDecoder>;

std::string decode_tokens(const Decoder& decoder, const std::vector<std::string>& tokens);

// How decoded text is written: as the tokenizer (and Hugging Face's decode) writes it, or readable:
// the spaces a WordPiece decoder puts around CJK characters removed ("春 风 。" -> "春风。"), as
// bert4keras's decoder writes Chinese. Other decoders' spaces are the text's own and stay.
enum class TextStyle { kTokenizer, kReadable };

// The space-joined text of a WordPiece decoder without the ASCII spaces next to a CJK character
// (ideographs, CJK symbols and punctuation, kana, fullwidth forms).
std::string join_cjk(const std::string& text);

}  // namespace attnkit::text
